package SandboxUtil;

# Helpers for the t/sandbox suites: run rlm-sandboxctl, start a private
# rlm-sandboxd, speak the framed protocol (docs/protocol.md) directly.
#
#     use FindBin; use lib $FindBin::Bin; use SandboxUtil;

use strict;
use Cwd ();
use File::Basename ();
use warnings;

use Exporter 'import';
use File::Temp qw( tempdir tempfile );
use IO::Socket::UNIX;
use JSON::PP;
use POSIX qw( :sys_wait_h );
use Time::HiRes qw( sleep time );

our @EXPORT = qw( $CTL $SANDBOXD require_root ctl_run cells start_manager
                  stop_manager remove_runtime_dir connect_sock send_frame recv_frame request
                  control channel_request proc_children janitor_of proc_alive
                  cgroup_dirs wait_until json_enc json_dec slurp );

# the checkout this file is in (t/sandbox/..)
my $root = $ENV{RLM_ROOT}
           || Cwd::abs_path(File::Basename::dirname(__FILE__) . '/../..');

our $CTL = $ENV{RLM_SANDBOXCTL} || "$root/build/bin/rlm-sandboxctl";
our $SANDBOXD = $ENV{RLM_SANDBOXD} || "$root/build/bin/rlm-sandboxd";

my $json = JSON::PP->new->utf8->canonical->allow_nonref;

sub json_enc { $json->encode($_[0]) }
sub json_dec { $json->decode($_[0]) }

sub require_root {
    require Test::More;
    if ($> != 0) {
        Test::More::plan(skip_all =>
            'rlm-sandboxd jails sandboxes with namespaces and cgroups: '
            . 'run as root');
    }
    for my $bin ($CTL, $SANDBOXD) {
        Test::More::plan(skip_all => "$bin not built (make -C sandbox)")
            unless -x $bin;
    }
}

# run a command with $stdin on its standard input; returns (stdout, status)
sub run_cmd {
    my ($cmd, $stdin) = @_;
    my ($fh, $path) = tempfile('rlmctl-in-XXXXXX', TMPDIR => 1,
                               UNLINK => 1);
    print {$fh} $stdin // '';
    close $fh;

    my $pid = open(my $out, '-|');
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        open(STDIN, '<', $path) or die "stdin: $!";
        open(STDERR, '>', '/dev/null') unless $ENV{RLM_TEST_VERBOSE};
        exec @$cmd or die "exec $cmd->[0]: $!";
    }
    local $/;
    my $text = <$out>;
    close $out;
    return ($text // '', $? >> 8);
}

# rlm-sandboxctl run ARGS with cells on stdin; returns decoded lines
sub ctl_run {
    my ($code, @args) = @_;
    my ($text, $rc) = run_cmd([$CTL, 'run', @args], $code);
    my @lines = map { json_dec($_) } grep { length } split /\n/, $text;
    return wantarray ? (\@lines, $rc) : \@lines;
}

# join cells with the #%% separator
sub cells { join("\n#%%\n", @_) . "\n" }

# runtime dirs made by this process, removed at exit (never recursively:
# only what a manager leaves, so nothing mounted can be touched)
my @dirs;
my $owner = $$;

sub remove_runtime_dir {
    my ($dir) = @_;
    for my $f (glob("$dir/s/*")) { unlink $f }
    rmdir "$dir/s";
    unlink "$dir/control.sock", "$dir/manager.lock", "$dir.log";
    rmdir "$dir/jail-root";
    rmdir $dir;
}

END {
    if ($$ == $owner) {
        remove_runtime_dir($_) for @dirs;
    }
}

# start a private manager; returns a hash with pid, dir, control path
sub start_manager {
    my (@args) = @_;
    my $dir = tempdir('rlmt-XXXXXX', TMPDIR => 1);
    push @dirs, $dir;
    pipe(my $r, my $w) or die "pipe: $!";
    my $pid = fork();
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        @dirs = ();
        close $r;
        my $fd = fileno($w);
        # keep the write end open across exec
        require Fcntl;
        my $flags = fcntl($w, Fcntl::F_GETFD(), 0);
        fcntl($w, Fcntl::F_SETFD(), $flags & ~Fcntl::FD_CLOEXEC());
        open(STDERR, '>', "$dir.log");
        exec $SANDBOXD, '--runtime-dir', $dir, '--ready-fd', $fd, @args
            or die "exec: $!";
    }
    close $w;
    my $buf = '';
    my $ok = eval {
        local $SIG{ALRM} = sub { die "timeout\n" };
        alarm 60;
        sysread($r, $buf, 1);
        alarm 0;
        1;
    };
    close $r;
    die "rlm-sandboxd did not start: " . slurp("$dir.log") unless $buf;
    return { pid => $pid, dir => $dir, log => "$dir.log",
             control => "$dir/control.sock" };
}

sub slurp {
    my ($p) = @_;
    open(my $f, '<', $p) or return '';
    local $/;
    return <$f>;
}

sub stop_manager {
    my ($m) = @_;
    return unless $m && $m->{pid};
    kill 'TERM', $m->{pid};
    waitpid($m->{pid}, 0);
    $m->{status} = $?;
    delete $m->{pid};
    remove_runtime_dir($m->{dir});
}

sub connect_sock {
    my ($path) = @_;
    my $s = IO::Socket::UNIX->new(Type => SOCK_STREAM(), Peer => $path);
    die "connect $path: $!" unless $s;
    return $s;
}

sub send_frame {
    my ($s, $obj, $blob) = @_;
    my $j = ref $obj ? json_enc($obj) : $obj;
    $blob //= '';
    print {$s} pack('NN', length $j, length $blob) . $j . $blob;
    $s->flush;
}

sub read_n {
    my ($s, $n) = @_;
    my $buf = '';
    while (length $buf < $n) {
        my $r = sysread($s, $buf, $n - length $buf, length $buf);
        return undef unless $r;
    }
    return $buf;
}

# one frame: decoded JSON, or undef on EOF
sub recv_frame {
    my ($s) = @_;
    my $h = read_n($s, 8);
    return undef unless defined $h;
    my ($jl, $bl) = unpack('NN', $h);
    my $j = read_n($s, $jl);
    read_n($s, $bl) if $bl;
    return json_dec($j);
}

sub request {
    my ($s, $obj, $blob) = @_;
    send_frame($s, $obj, $blob);
    return recv_frame($s);
}

# one control request on a fresh connection
sub control {
    my ($m, $obj) = @_;
    my $s = connect_sock(ref $m ? $m->{control} : $m);
    my $r = request($s, $obj);
    close $s;
    return $r;
}

# a request on a sandbox channel; callbacks answered by $on_call->($call)
sub channel_request {
    my ($s, $obj, $on_call, $blob) = @_;
    send_frame($s, $obj, $blob);
    my @calls;
    while (1) {
        my $f = recv_frame($s);
        return (undef, \@calls) unless defined $f;
        if (($f->{type} // '') eq 'call') {
            push @calls, $f;
            send_frame($s, $on_call->($f));
            next;
        }
        return wantarray ? ($f, \@calls) : $f;
    }
}

# pids whose parent is $ppid, with their state letter
# the manager's sandbox processes (pid => state), without its cgroup
# janitor (see janitor_of)
sub proc_children {
    my ($ppid) = @_;
    my %kids;
    for my $stat (glob('/proc/[0-9]*/stat')) {
        my $t = slurp($stat) or next;
        $t =~ /^(\d+) \((.*)\) (\S) (\d+)/s or next;
        $kids{$1} = $3 if $4 == $ppid && $2 ne 'rlm-janitor';
    }
    return \%kids;
}

# the pid of the manager's cgroup janitor, or undef
sub janitor_of {
    my ($ppid) = @_;
    for my $stat (glob('/proc/[0-9]*/stat')) {
        my $t = slurp($stat) or next;
        $t =~ /^(\d+) \((.*)\) \S (\d+)/s or next;
        return $1 if $3 == $ppid && $2 eq 'rlm-janitor';
    }
    return undef;
}

sub proc_alive {
    my ($pid) = @_;
    return -e "/proc/$pid";
}

# cgroup directories named $name anywhere under /sys/fs/cgroup (depth 6)
sub cgroup_dirs {
    my ($name) = @_;
    my @found;
    my @queue = (['/sys/fs/cgroup', 0]);
    while (my $e = shift @queue) {
        my ($d, $depth) = @$e;
        opendir(my $dh, $d) or next;
        for my $n (readdir $dh) {
            next if $n eq '.' || $n eq '..';
            my $p = "$d/$n";
            next if -l $p || !-d _;
            push @found, $p if $n eq $name;
            push @queue, [$p, $depth + 1] if $depth < 6;
        }
        closedir $dh;
    }
    return @found;
}

sub wait_until {
    my ($cond, $secs) = @_;
    my $end = time + ($secs // 10);
    while (time < $end) {
        return 1 if $cond->();
        sleep 0.02;
    }
    return $cond->() ? 1 : 0;
}

1;
