# Attack suite for the sandbox jail: every test is a real attempt, run as
# model-written Python through rlm-sandboxctl against ONE long-lived
# rlm-sandboxd, and states its exact expected outcome.  After every attack
# the same manager must still serve a fresh session, and no sandbox may be
# left behind (cgroups, processes, zombies).
#
# Needs root (namespaces, cgroups).  Uses $RLM_SANDBOXD and $RLM_SANDBOXCTL
# (default: build/bin next to this checkout).  docs/security.md lists every
# attack with its expected outcome.

use strict;
use warnings;

use Test::More;
use JSON::PP;
use IO::Socket::UNIX;
use File::Temp qw(tempdir);
use File::Basename qw(dirname);
use Cwd qw(abs_path);
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(sleep time);

my $here = dirname(abs_path(__FILE__));
my $root = abs_path("$here/../..");
my $attacks = "$here/attacks";

my $sandboxd = $ENV{RLM_SANDBOXD} || "$root/build/bin/rlm-sandboxd";
my $ctl = $ENV{RLM_SANDBOXCTL} || "$root/build/bin/rlm-sandboxctl";
my $selftest = dirname($sandboxd) . "/rlm-jail-selftest";

plan skip_all => 'needs root (namespaces, cgroups)' if $> != 0;
plan skip_all => "no executable $sandboxd" unless -x $sandboxd;
plan skip_all => "no executable $ctl" unless -x $ctl;

my $json = JSON::PP->new->canonical;

# limits for every attack session: small, so abuse is quick to contain
my %LIMITS = (wall_ms => 3000, cpu_s => 2, memory_mb => 128, pids => 16,
              tmpfs_mb => 8, output_bytes => 65536);
my $LIMITS = $json->encode(\%LIMITS);

my $SECRET = "hunter2-$$-" . int(rand(1e9));

# ---------------------------------------------------------------------
# the manager under attack

my $tmp = tempdir("rlm-attacks-XXXXXX", TMPDIR => 1, CLEANUP => 1);
chmod 0755, $tmp;
my $rt = "$tmp/rt";
mkdir $rt or die "mkdir $rt: $!";
our $cgname = "rlm-attacks-$$";
our $control = "$rt/control.sock";
my $POOL = 2;

our $mgr_pid = fork() // die "fork: $!";
if ($mgr_pid == 0) {
    # the secret is in the manager's environment: no sandbox may see it
    %ENV = (PATH => '/usr/bin:/bin', RLM_ATTACK_SECRET => $SECRET);
    open STDOUT, '>', "$tmp/manager.log";
    open STDERR, '>&', \*STDOUT;
    exec $sandboxd, '--runtime-dir', $rt, '--pool', $POOL,
        '--cgroup-name', $cgname, '--verbose';
    die "exec $sandboxd: $!";
}

END {
    local $?;    # waitpid below must not become our exit status
    if ($mgr_pid) {
        kill 'TERM', $mgr_pid;
        my $t0 = time;
        while (waitpid($mgr_pid, WNOHANG) == 0 && time - $t0 < 10) {
            sleep 0.05;
        }
        kill 'KILL', $mgr_pid;
        waitpid($mgr_pid, 0);
    }
}

sub wait_for_manager {
    for (1 .. 400) {
        if (-S $control) {
            my $r = eval { control({op => 'ping'}) };
            return 1 if $r && $r->{ok};
        }
        sleep 0.05;
    }
    return 0;
}

# ---------------------------------------------------------------------
# wire helpers (docs/protocol.md framing)

sub read_exact {
    my ($sock, $n) = @_;
    my $buf = '';
    while (length($buf) < $n) {
        my $got = sysread($sock, $buf, $n - length($buf), length($buf));
        die "read: $!" unless defined $got;
        return undef if $got == 0;
    }
    return $buf;
}

sub send_frame {
    my ($sock, $obj) = @_;
    my $j = $json->encode($obj);
    my $msg = pack('NN', length($j), 0) . $j;
    my $off = 0;
    while ($off < length $msg) {
        my $w = syswrite($sock, $msg, length($msg) - $off, $off);
        die "write: $!" unless defined $w;
        $off += $w;
    }
}

sub recv_frame {
    my ($sock) = @_;
    my $hdr = read_exact($sock, 8);
    return undef unless defined $hdr;
    my ($jl, $bl) = unpack('NN', $hdr);
    my $j = read_exact($sock, $jl);
    read_exact($sock, $bl) if $bl;
    return $json->decode($j);
}

sub control {
    my ($req) = @_;
    my $s = IO::Socket::UNIX->new(Peer => $control, Type => SOCK_STREAM)
        or die "connect $control: $!";
    local $SIG{ALRM} = sub { die "control timeout\n" };
    alarm 10;
    send_frame($s, $req);
    my $rep = recv_frame($s);
    alarm 0;
    close $s;
    return $rep;
}

# exec on an existing sandbox's channel (to check a kept session)
sub channel_exec {
    my ($path, $code) = @_;
    my $s = IO::Socket::UNIX->new(Peer => $path, Type => SOCK_STREAM)
        or return undef;
    local $SIG{ALRM} = sub { die "channel timeout\n" };
    alarm 10;
    send_frame($s, {op => 'exec', code => $code});
    my $rep;
    while (defined(my $f = recv_frame($s))) {
        if (($f->{type} // '') eq 'result') { $rep = $f; last }
    }
    alarm 0;
    close $s;
    return $rep;
}

# ---------------------------------------------------------------------
# running cells through the CLI

my $ncell = 0;

sub cell_file {
    my ($c) = @_;
    return "$attacks/$c" if $c =~ /\.py$/ && -f "$attacks/$c";
    my $f = "$tmp/cell-" . ++$ncell . ".py";
    open my $fh, '>', $f or die "$f: $!";
    print $fh $c;
    close $fh;
    return $f;
}

# run(cells, keep => 1, limits => {...}) -> { results => [...], stderr,
# rc, sandbox, pid }
sub run {
    my ($cells, %o) = @_;
    my @files = map { cell_file($_) } @$cells;
    my $limits = $o{limits} ? $json->encode({%LIMITS, %{$o{limits}}})
                            : $LIMITS;
    my @cmd = ($ctl, 'run', '--manager', $control, '--limits', $limits);
    push @cmd, '--keep' if $o{keep};

    my $errf = "$tmp/stderr-$ncell.txt";
    my $pid = open(my $out, '-|') // die "fork: $!";
    if ($pid == 0) {
        open STDERR, '>', $errf;
        exec @cmd, @files;
        die "exec $ctl: $!";
    }
    my @res;
    while (my $line = <$out>) {
        my $r = eval { $json->decode($line) };
        push @res, $r if $r && ($r->{type} // '') eq 'result';
    }
    close $out;
    my $rc = $? >> 8;
    my $stderr = do { local (@ARGV, $/) = ($errf); <> } // '';
    my ($sb, $spid) = $stderr =~ /sandbox (\S+) pid (\d+)/;
    return { results => \@res, stderr => $stderr, rc => $rc,
             sandbox => $sb, pid => $spid };
}

# ---------------------------------------------------------------------
# lifecycle inspection from the host

sub cgroup_parent {
    my $v2 = -e '/sys/fs/cgroup/cgroup.controllers';
    open my $fh, '<', "/proc/$mgr_pid/cgroup" or return undef;
    while (<$fh>) {
        chomp;
        my (undef, $ctrl, $path) = split /:/, $_, 3;
        if ($v2 && $ctrl eq '') {
            $path =~ s{/\Q$cgname\E/_manager$}{};
            $path = '' if $path eq '/';
            return "/sys/fs/cgroup$path/$cgname";
        }
        if (!$v2 && grep { $_ eq 'memory' } split /,/, $ctrl) {
            my $d = "/sys/fs/cgroup/memory$path/$cgname";
            $d = "/sys/fs/cgroup/memory/$cgname" unless -d $d;
            return $d;
        }
    }
    return undef;
}

sub sandbox_cgroups {
    my $p = cgroup_parent() // return ();
    opendir my $d, $p or return ();
    return grep { !/^\./ && $_ ne '_manager' && -d "$p/$_" } readdir $d;
}

# children of the manager: [pid, state]
sub manager_children {
    my @kids;
    opendir my $d, '/proc' or return ();
    for my $p (grep { /^\d+$/ } readdir $d) {
        open my $fh, '<', "/proc/$p/stat" or next;
        my $st = <$fh> // next;
        my ($state, $ppid) = $st =~ /\)\s+(\S)\s+(\d+)/ or next;
        push @kids, [$p, $state] if $ppid == $mgr_pid;
    }
    return @kids;
}

# wait up to 10 s for a condition (the pool refills in the background)
sub settle (&) {
    my ($cond) = @_;
    for (1 .. 200) {
        return 1 if $cond->();
        sleep 0.05;
    }
    return $cond->();
}

# after every attack: the manager serves x = 1, and nothing leaked
sub still_serves {
    my ($name) = @_;
    ok(kill(0, $mgr_pid), "$name: manager still running");
    my $r = run(["x = 1\nprint(x)\n"]);
    my $res = $r->{results}[0] // {};
    ok(($res->{status} // '') eq 'ok' && ($res->{stdout} // '') eq "1\n",
       "$name: a fresh session still runs x = 1")
        or diag explain $r;

    my $clean = settle {
        my $st = control({op => 'stats'});
        my @cg = sandbox_cgroups();
        my @z = grep { $_->[1] eq 'Z' } manager_children();
        $st->{live} == 0 && @cg == $st->{idle} && !@z;
    };
    ok($clean, "$name: no live sandbox, cgroups == idle pool, no zombie")
        or diag explain { stats => control({op => 'stats'}),
                          cgroups => [sandbox_cgroups()],
                          children => [manager_children()] };
}

# ---------------------------------------------------------------------
# the attack table: file => expected outcome

sub err_is {
    my ($ename, $evalue) = @_;
    return sub {
        my ($res, $name) = @_;
        is($res->{status}, 'error', "$name: status error");
        is($res->{error}{ename}, $ename, "$name: raises $ename");
        like($res->{error}{evalue}, $evalue, "$name: $evalue")
            if $evalue;
    };
}

sub killed_by {
    my ($status, $signal) = @_;
    return sub {
        my ($res, $name) = @_;
        is($res->{status}, $status, "$name: status $status");
        is($res->{signal}, $signal, "$name: sandbox died of signal $signal");
    };
}

my $EPERM = qr/^\[Errno 1\] Operation not permitted/;
my $ENOENT = qr/^\[Errno 2\] No such file or directory/;
my $SIGSYS = 31;

my @ATTACKS = (
    # resource abuse
    ['cpu_spin.py' => sub {
        my ($r, $n) = @_;
        is($r->{status}, 'timeout', "$n: status timeout");
        is($r->{error}{ename}, 'TimeoutError', "$n: TimeoutError raised");
    }],
    # switch the time limits off from inside: every change refused, and
    # the CPU limit still ends the cell (a failing run is capped by
    # session_cpu_s instead of spinning for an hour)
    ['time_limit_tamper.py' => sub {
        my ($r, $n) = @_;
        is($r->{status}, 'timeout', "$n: status timeout");
        like($r->{error}{evalue} // '', qr/CPU time limit/,
             "$n: the CPU limit still fired");
        is($r->{stdout},
           "SIGALRM PermissionError 1\nSIGXCPU PermissionError 1\n"
           . "SIGUSR1 PermissionError 1\nsiginterrupt PermissionError 1\n"
           . "setrlimit ValueError None\nprlimit PermissionError 1\n"
           . "raw setrlimit -1 1\nhandler kept _on_timer\n",
           "$n: handlers and RLIMIT_CPU could not be changed");
    }, {session_cpu_s => 20, wall_ms => 30000}],
    ['cpu_spin_c.py' => sub {
        my ($r, $n) = @_;
        is($r->{status}, 'timeout', "$n: status timeout");
        like($r->{reason}, qr/^(wall|cpu)_limit$/,
             "$n: the manager killed it for its limit");
    }],
    ['sleep_wall.py' => sub {
        my ($r, $n) = @_;
        is($r->{status}, 'timeout', "$n: status timeout");
        is($r->{error}{ename}, 'TimeoutError', "$n: TimeoutError raised");
    }],
    ['memory_balloon_big.py' => sub {
        my ($r, $n) = @_;
        is($r->{status}, 'oom', "$n: status oom");
        is($r->{error}{ename}, 'MemoryError', "$n: MemoryError raised");
    }],
    # past the 3 s wall limit on a busy host otherwise
    ['memory_balloon_cgroup.py' => sub {
        my ($r, $n) = @_;
        is($r->{status}, 'oom', "$n: status oom");
        is($r->{reason}, 'oom', "$n: the cgroup OOM killer took it");
    }, {wall_ms => 30000, cpu_s => 30}],
    ['memory_balloon_data.py' => sub {
        my ($r, $n) = @_;
        is($r->{status}, 'oom', "$n: status oom");
        is($r->{error}{ename}, 'MemoryError',
           "$n: MemoryError raised at the soft limit, the sandbox lives");
    }, {wall_ms => 30000, cpu_s => 30}],
    ['recursion_heap.py' => err_is('RecursionError')],
    ['fork_bomb.py' => err_is('PermissionError', $EPERM)],
    ['thread_bomb.py' => sub {
        my ($r, $n) = @_;
        is($r->{status}, 'ok', "$n: status ok");
        my ($t) = ($r->{stdout} // '') =~ /^threads (\d+) RuntimeError$/m;
        ok(defined $t && $t < $LIMITS{pids},
           "$n: thread creation stopped below pids=$LIMITS{pids} ("
           . ($t // 'none') . ")");
    }],
    ['output_flood.py' => sub {
        my ($r, $n) = @_;
        is($r->{status}, 'output_truncated', "$n: status output_truncated");
        ok(length($r->{stdout} // '') <= $LIMITS{output_bytes}
           && length($r->{stdout} // '') > 0,
           "$n: stdout capped at $LIMITS{output_bytes} bytes ("
           . length($r->{stdout} // '') . ")");
    }],
    ['disk_fill.py' => sub {
        my ($r, $n) = @_;
        is($r->{status}, 'ok', "$n: status ok");
        my ($mb, $e) = ($r->{stdout} // '') =~ /^filled_mb (\d+) (\w+)$/m;
        is($e, 'ENOSPC', "$n: stopped by ENOSPC");
        ok(defined $mb && $mb <= $LIMITS{tmpfs_mb},
           "$n: at most tmpfs_mb=$LIMITS{tmpfs_mb} MiB written");
    }],
    ['fd_exhaustion.py' => sub {
        my ($r, $n) = @_;
        is($r->{status}, 'ok', "$n: status ok");
        my ($k, $e) = ($r->{stdout} // '') =~ /^fds (\d+) (\w+)$/m;
        is($e, 'EMFILE', "$n: stopped by EMFILE");
        ok(defined $k && $k > 0 && $k < 1024,
           "$n: RLIMIT_NOFILE bounds the fds (" . ($k // '?') . ")");
    }],
    ['sparse_file.py' => err_is('OSError', qr/^\[Errno 27\] File too large/)],

    # crashes
    ['recursion_python.py' => err_is('RecursionError')],
    # building and walking the nested list takes seconds on a busy host
    ['recursion_c_stack.py' => killed_by('crashed', 11),
        {wall_ms => 30000, cpu_s => 30}],
    ['ctypes_null.py' => killed_by('crashed', 11)],

    # disclosure
    ['etc_shadow.py' => err_is('FileNotFoundError', $ENOENT)],
    ['root_home.py' => err_is('FileNotFoundError', $ENOENT)],
    ['proc_environ.py' => err_is('FileNotFoundError', $ENOENT)],
    ['proc_mountinfo.py' => err_is('FileNotFoundError', $ENOENT)],
    ['proc_self_mem.py' => err_is('FileNotFoundError', $ENOENT)],
    ['cgroup_fs.py' => err_is('FileNotFoundError', $ENOENT)],
    ['environment.py' => sub {
        my ($r, $n) = @_;
        is($r->{status}, 'ok', "$n: status ok");
        is($r->{stdout}, "[] True\n",
           "$n: os.environ and libc environ are empty");
        unlike($r->{stdout} // '', qr/\Q$SECRET\E/,
               "$n: the manager's secret is not visible");
    }],
    ['memory_scan.py' => sub {
        my ($r, $n) = @_;
        is($r->{status}, 'ok', "$n: status ok");
        is($r->{stdout},
           "argv seen True heap scanned True secret hits 0\n",
           "$n: the inherited memory holds no trace of the secret");
    }],
    ['inherited_fds.py' => sub {
        my ($r, $n) = @_;
        is($r->{status}, 'ok', "$n: status ok");
        my $fds = $r->{stdout} // '';
        like($fds, qr/^\[\(0, 'null'\), \(1, 'null'\), \(2, 'null'\)/,
             "$n: 0, 1, 2 are /dev/null");
        my @other = $fds =~ /\((\d+), '(?!null|sock')/g;
        my @socks = $fds =~ /\((\d+), 'sock'\)/g;
        ok(!@other && @socks >= 1 && @socks <= 2,
           "$n: besides them only the channel sockets (@socks)");
    }],

    # network
    ['tcp_localhost.py' => err_is('PermissionError', $EPERM)],
    ['udp_external.py' => err_is('PermissionError', $EPERM)],
    ['dns.py' => err_is('gaierror')],
    ['abstract_unix.py' => err_is('PermissionError', $EPERM)],
    ['netlink.py' => err_is('PermissionError', $EPERM)],
    ['vsock.py' => err_is('PermissionError', $EPERM)],
    ['packet.py' => err_is('PermissionError', $EPERM)],
    ['socketpair.py' => err_is('PermissionError', $EPERM)],

    # process escape
    ['os_system.py' => sub {
        my ($r, $n) = @_;
        is($r->{status}, 'ok', "$n: status ok");
        is($r->{stdout}, "system 32512 False\n",
           "$n: no shell ran (exit 127), no file created");
    }],
    ['subprocess_run.py' => err_is('PermissionError', $EPERM)],
    ['execv.py' => err_is('PermissionError', $EPERM)],
    ['kill_all.py' => err_is('ProcessLookupError')],
    ['kill_parent.py' => sub {
        my ($r, $n) = @_;
        is($r->{status}, 'ok', "$n: status ok");
        is($r->{stdout}, "ppid 0\nsurvived\n",
           "$n: parent invisible (ppid 0), kill(0) hit only the sandbox");
    }],
    ['ptrace.py' => killed_by('crashed', $SIGSYS)],
    ['unshare.py' => killed_by('crashed', $SIGSYS)],
    ['setns.py' => killed_by('crashed', $SIGSYS)],
    ['raw_mount.py' => killed_by('crashed', $SIGSYS)],
    ['bpf.py' => killed_by('crashed', $SIGSYS)],
    ['keyctl.py' => killed_by('crashed', $SIGSYS)],
    ['io_uring.py' => killed_by('crashed', $SIGSYS)],
    ['userfaultfd.py' => killed_by('crashed', $SIGSYS)],
    ['perf_event.py' => killed_by('crashed', $SIGSYS)],
    ['process_vm_readv.py' => killed_by('crashed', $SIGSYS)],
    ['personality.py' => killed_by('crashed', $SIGSYS)],
    ['sysv_ipc.py' => killed_by('crashed', $SIGSYS)],
    ['set_clock.py' => killed_by('crashed', $SIGSYS)],
    ['sethostname.py' => killed_by('crashed', $SIGSYS)],
    ['mmap_rwx.py' => err_is('PermissionError', $EPERM)],
    ['mprotect_exec.py' => sub {
        my ($r, $n) = @_;
        is($r->{status}, 'ok', "$n: status ok");
        is($r->{stdout}, "mprotect -1 1\n", "$n: mprotect(RWX) -> EPERM");
    }],
    ['memfd_exec.py' => err_is('PermissionError', $EPERM)],
    ['shellcode_i386.py' => killed_by('crashed', 11)],
    ['tiocsti.py' => err_is('PermissionError', $EPERM)],
    ['setuid_root.py' => sub {
        my ($r, $n) = @_;
        err_is('PermissionError', $EPERM)->($r, $n);
        my ($uid) = ($r->{stdout} // '') =~ /^uid (\d+)$/m;
        ok(defined $uid && $uid != 0, "$n: runs as uid " . ($uid // '?'));
    }],
    ['chroot_escape.py' => err_is('PermissionError', $EPERM)],

    ['ifconf_leak.py' => err_is('PermissionError', $EPERM)],

    # covert channels between sessions through the shared read-only files
    ['lock_channel.py' =>
        err_is('OSError', qr/^\[Errno 37\] No locks available/)],
    ['dnotify_channel.py' => err_is('PermissionError', $EPERM)],
    ['page_cache_probe.py' => sub {
        my ($r, $n) = @_;
        is($r->{status}, 'ok', "$n: status ok");
        is($r->{stdout},
           "fadvise PermissionError 1\npreadv2 PermissionError 1\n"
           . "readahead -1 1\nmincore -1 1\npreadv 16\n",
           "$n: eviction and residency probes refused, plain reads work");
    }],
    ['futex_channel.py' => sub {
        my ($r, $n) = @_;
        is($r->{status}, 'ok', "$n: status ok");
        is($r->{stdout},
           "shared wake -1 38\nshared wait -1 38\nprivate wake 0 0\n",
           "$n: shared futexes ENOSYS, private ones work");
    }],
);

# ---------------------------------------------------------------------

ok(wait_for_manager(), 'manager serves its control socket')
    or BAIL_OUT("manager did not start: "
                . do { local (@ARGV, $/) = ("$tmp/manager.log"); <> });

my $cgparent = cgroup_parent();
ok($cgparent && -d $cgparent, "parent cgroup exists ($cgparent)");
still_serves('baseline');

# An AddressSanitizer build of the manager cannot run these as the
# product does: ASan maps terabytes of shadow memory, so RLIMIT_AS and
# RLIMIT_DATA are left unset, and its allocator keeps freed memory where the scan looks.
my %NOT_UNDER_SAN = (
    'memory_balloon_big.py' => 'RLIMIT_AS is not applied under ASan',
    'memory_balloon_data.py' => 'RLIMIT_DATA is not applied under ASan',
    'memory_scan.py'        => 'ASan quarantines freed heap memory',
);

# RLM_ATTACKS=name,name runs only those rows of the table (development)
my %ONLY = map { $_ => 1 } split /,/, $ENV{RLM_ATTACKS} // '';

for my $a (@ATTACKS) {
    my ($file, $check, $limits) = @$a;
    (my $name = $file) =~ s/\.py$//;
    -f "$attacks/$file" or die "missing attack $file";
    next if %ONLY && !$ONLY{$name};

    if ($ENV{RLM_SANITIZED} && $NOT_UNDER_SAN{$file}) {
        SKIP: { skip "$name: $NOT_UNDER_SAN{$file}", 1 }
        next;
    }

    my $r = run([$file], $limits ? (limits => $limits) : ());
    my $res = $r->{results}[-1];
    ok($res, "$name: one result") or diag explain $r;
    $check->($res // {}, $name);
    still_serves($name);
}

# control socket: its path is handed to the cell; invisible and unreachable
{
    my $r = run(["CONTROL_PATH = '$control'\n", 'control_sock.py']);
    my $res = $r->{results}[-1] // {};
    is($res->{status}, 'error', 'control_sock: status error');
    is($res->{stdout}, "visible False\n",
       'control_sock: the manager socket path does not exist in the jail');
    is($res->{error}{ename}, 'PermissionError',
       'control_sock: socket() refused');
    still_serves('control_sock');
}

# builtins tampering does not reach the next session
{
    my $r = run(['builtins_tamper.py']);
    is($r->{results}[0]{status}, 'ok', 'builtins_tamper: cell ran');
    my $r2 = run(["print(open.__name__, __import__('json').dumps(1))\n"]);
    is($r2->{results}[0]{stdout}, "open 1\n",
       'builtins_tamper: next session has intact builtins');
    still_serves('builtins_tamper');
}

# cross-session: files, /dev/shm, globals (gc), random streams, kill(-1)
{
    my $a = run(['tmp_write.py', "x = 41\n"], keep => 1);
    is($a->{results}[0]{stdout}, "shm FileNotFoundError\n",
       'cross: session A has no /dev/shm');
    ok($a->{sandbox}, 'cross: session A kept (' . ($a->{sandbox} // '') . ')');

    my $b = run(['tmp_read.py', 'gc_scan.py', 'kill_all.py']);
    is($b->{results}[0]{stdout}, "tmp [] False False\n",
       "cross: B sees an empty /tmp, not A's file");
    is($b->{results}[1]{stdout}, "found 0 0\n",
       "cross: B's gc scan finds no trace of A's globals");
    is($b->{results}[2]{error}{ename}, 'ProcessLookupError',
       'cross: kill(-1) in B finds nobody to kill');

    my $st = control({op => 'status', sandbox => $a->{sandbox}});
    ok($st->{ok} && $st->{alive}, 'cross: A is alive after B attacked');
    my $ex = channel_exec("$rt/s/$a->{sandbox}.sock", "print(x + 1)\n");
    is($ex && $ex->{stdout}, "42\n", 'cross: A kept its state (x + 1 = 42)');

    # release A: nothing of it may remain
    my $cg = "$cgparent/$a->{sandbox}";
    ok(-d $cg, 'lifecycle: A has a cgroup while alive');
    my $rel = control({op => 'release', sandbox => $a->{sandbox}});
    ok($rel->{ok}, 'lifecycle: release A');
    ok(settle { !-d $cg }, 'lifecycle: A\'s cgroup is gone');
    ok(settle {
        my $p = $a->{pid};
        !-e "/proc/$p" || !grep { $_->[0] == $p } manager_children();
    }, "lifecycle: A's process $a->{pid} is gone (not even a zombie)");
    still_serves('cross_session');
}

{
    my @seen;
    for (1 .. 3) {
        my $r = run(['random_stream.py']);
        push @seen, $r->{results}[0]{stdout} // '';
    }
    my %u = map { $_ => 1 } @seen;
    my @bad = grep { !/^\d+ [0-9a-f]{16} [0-9a-f]{32}\n\z/ } @seen;
    ok(@seen == 3 && keys(%u) == 3 && !@bad,
       'random: three sessions draw three different streams')
        or diag explain \@seen;
}

# lifecycle of a crashed session: no process, no zombie, no cgroup
{
    my $r = run(['x = 1', 'ptrace.py'], keep => 1);
    is($r->{results}[-1]{status}, 'crashed', 'lifecycle: crash on purpose');
    my $cg = "$cgparent/" . ($r->{sandbox} // 'none');
    my $rel = control({op => 'release', sandbox => $r->{sandbox}});
    ok(settle { !-d $cg }, 'lifecycle: crashed sandbox cgroup removed');
    ok(settle { !grep { $_->[1] eq 'Z' } manager_children() },
       'lifecycle: no zombie after a crash');
    still_serves('lifecycle_crash');
}

# the C-level jail self-test (raw syscalls, i386/x32 ABI, capabilities)
SKIP: {
    skip "no $selftest (make -C sandbox jail-selftest)", 1 unless -x $selftest;
    # built with ASan the self-test hangs inside its jailed child (the
    # sanitizer runtime and the seccomp filter do not mix); the product
    # binary is covered by the attacks above
    skip 'jail self-test does not run under ASan', 1 if $ENV{RLM_SANITIZED};
    # a hang must fail the test, not the whole run
    my $out = `timeout 120 $selftest 2>&1`;
    my $rc = $? >> 8;
    my @bad = grep { /^not ok/ } split /\n/, $out;
    ok($rc == 0 && !@bad && $out =~ /^1\.\.(\d+)$/m && $1 > 50,
       'jail self-test: every C-level attack contained')
        or diag $out;
}

# a manager killed with SIGKILL takes its sandboxes with it, and the next
# manager with the same cgroup name removes what was left
{
    my $rt2 = "$tmp/rt2";
    mkdir $rt2;
    my $cg2 = "$cgname-b";
    my $start = sub {
        my $pid = fork() // die "fork: $!";
        if ($pid == 0) {
            %ENV = (PATH => '/usr/bin:/bin');
            open STDOUT, '>>', "$tmp/manager2.log";
            open STDERR, '>&', \*STDOUT;
            exec $sandboxd, '--runtime-dir', $rt2, '--pool', 2,
                '--cgroup-name', $cg2;
            exit 127;
        }
        return $pid;
    };
    my $sock2 = "$rt2/control.sock";
    my $m2 = $start->();
    ok(settle { -S $sock2 }, 'manager kill: second manager up');

    # one live session plus the idle pool
    my $ctl_pid = open(my $out, '-|') // die;
    if ($ctl_pid == 0) {
        open STDERR, '>&', \*STDOUT;
        exec $ctl, 'run', '--manager', $sock2, '--keep',
            cell_file("import time\nx = 1\n");
        exit 127;
    }
    my $txt = do { local $/; <$out> };
    close $out;
    my ($sb, $sbpid) = $txt =~ /sandbox (\S+) pid (\d+)/;
    ok($sbpid, "manager kill: session kept (pid " . ($sbpid // '?') . ")");

    my $cgp = do {
        local $mgr_pid = $m2;
        local $cgname = $cg2;
        cgroup_parent();
    };
    my $list = sub {
        opendir(my $d, $cgp) or return ();
        return grep { !/^\./ && $_ ne '_manager' && -d "$cgp/$_" } readdir $d;
    };
    my $procs = sub {
        open(my $fh, '<', "$cgp/$_[0]/cgroup.procs") or return ();
        return map { chomp; $_ } <$fh>;
    };
    # the pool refills in the background: wait for 1 live + 2 idle
    my @before;
    settle { @before = $list->(); @before >= 3 && !grep { !$procs->($_) }
                                                       @before };
    ok(@before >= 3, 'manager kill: 3 sandbox cgroups (1 live + pool)');
    my @pids = map { $procs->($_) } @before;

    kill 'KILL', $m2;
    waitpid($m2, 0);

    my $gone = settle {
        !grep { -e "/proc/$_" && !(`cat /proc/$_/stat 2>/dev/null`
                                   =~ /\)\s+Z/) } @pids
    };
    ok($gone && @pids >= 3,
       'manager kill: every sandbox died with it (' . scalar(@pids) . ')')
        or diag explain { before => \@before, pids => \@pids };

    # restart: leftovers removed, only the new pool remains
    my $m3 = $start->();
    ok(settle { -S $sock2 && eval {
        local $control = $sock2; control({op => 'ping'})->{ok} } },
       'manager kill: restarted on the same runtime dir');
    my $clean = settle {
        my %old = map { $_ => 1 } @before;
        !grep { $old{$_} } $list->();
    };
    ok($clean, "manager kill: the dead manager's cgroups were removed");
    kill 'TERM', $m3;
    waitpid($m3, 0);
    ok(settle { !$list->() },
       'manager kill: a stopped manager leaves no sandbox cgroup');
}

# the manager survived everything and its pool is whole
{
    my $ok = settle {
        my $s = control({op => 'stats'});
        $s->{ok} && $s->{live} == 0 && $s->{idle} == $POOL;
    };
    ok($ok, "end: pool back to $POOL idle sandboxes, none live")
        or diag explain control({op => 'stats'});
}

done_testing();
