# Lifecycle: leftovers removed at start, one manager per directory, warm
# pool refill and bursts beyond it, release leaving nothing behind (no
# process, no zombie, no cgroup, no socket), deaths recorded for status,
# and the manager leaving with its parent, taking every sandbox along.

use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use SandboxUtil;
use File::Temp qw( tempdir );
use POSIX qw( :sys_wait_h );
use Test::More;
use Time::HiRes qw( sleep );

require_root();

# a fixed parent cgroup name: a killed run's leftovers are cleaned by the
# next manager that starts with it
my $cg = 'rlmtest-lifecycle';

# leftovers of a previous run are removed at start
my $dir = tempdir('rlml-XXXXXX', TMPDIR => 1, CLEANUP => 1);
mkdir "$dir/s";
for my $f ("$dir/s/0000dead0001.sock", "$dir/control.sock") {
    open(my $fh, '>', $f) or die;
    close $fh;
}

my $m = start_manager('--pool', '0', '--cgroup-name', $cg);
my $m2 = eval { start_manager('--pool', '0') };
stop_manager($m);
ok(!$m2, 'a second manager on another dir starts') if 0;
stop_manager($m2) if $m2;

my $pid = fork();
if ($pid == 0) {
    open(STDERR, '>', '/dev/null');
    exec $SANDBOXD, '--runtime-dir', $dir, '--pool', '0', '--cgroup-name',
        $cg or exit 99;
}
# the manager binds its socket after removing stale ones (an ASan build
# takes more than a second to get there)
ok(wait_until(sub { -S "$dir/control.sock" }, 60),
   'control socket replaced by a live one');
ok(!-e "$dir/s/0000dead0001.sock", 'stale sandbox socket removed');

# a second manager on the same directory does not take it over: it waits
# (as after an nginx restart, while the old one still reaps its
# sandboxes) and serves once the first one has gone
my $second = fork();
if ($second == 0) {
    open(STDERR, '>', "$dir.second.log");
    exec $SANDBOXD, '--runtime-dir', $dir, '--pool', '0', '--cgroup-name',
        $cg or exit 99;
}
sleep 0.5;
ok(control("$dir/control.sock", { op => 'ping' })->{ok},
   'the first one still serves');
is(waitpid($second, WNOHANG), 0, 'the second one waits');
like(slurp("$dir.second.log"), qr/waiting for the rlm-sandboxd on /,
     'and says so');
kill 'TERM', $pid;
waitpid($pid, 0);
is($? >> 8, 0, 'SIGTERM: clean exit');
ok(wait_until(sub { -S "$dir/control.sock"
                    && (eval { control("$dir/control.sock",
                                       { op => 'ping' })->{ok} } // 0) },
              10),
   'the second one takes over once the first has gone');
kill 'TERM', $second;
waitpid($second, 0);
is($? >> 8, 0, 'the second one exits cleanly too');
unlink "$dir.second.log";
ok(!-e "$dir/control.sock", 'control socket removed on exit');

# release: nothing left
$m = start_manager('--pool', '0', '--cgroup-name', $cg);
my $a = control($m, { op => 'acquire', session => 'life1' });
ok($a->{ok}, 'acquired');
ok(!$a->{warm}, 'pool 0: a cold sandbox');
my $sp = $a->{pid};
ok(proc_alive($sp), 'sandbox process alive');
ok(-S $a->{path}, 'channel socket exists');
my @cgd = grep { m{/$cg/} } cgroup_dirs($a->{sandbox});
ok(@cgd >= 1, 'sandbox has its cgroup: ' . join(' ', @cgd));
my $ch = connect_sock($a->{path});
is(request($ch, { op => 'exec', code => 'x = 1' })->{status}, 'ok',
   'it works');
close $ch;
my $r = control($m, { op => 'release', sandbox => $a->{sandbox} });
ok($r->{ok}, 'released');
ok(!proc_alive($sp), 'no process (and no zombie) once release answered');
# the cgroup is removed by the janitor, off the manager's loop, right after
ok(wait_until(sub { !grep { -d $_ } @cgd }, 10), 'its cgroup is gone');
ok(!-e $a->{path}, 'its socket is gone');
is(scalar keys %{ proc_children($m->{pid}) }, 0, 'manager has no sandbox');
my $jan = janitor_of($m->{pid});
ok($jan, 'the manager has its cgroup janitor');
like(slurp("/proc/$jan/status") // '', qr/^PPid:\s+$m->{pid}$/m,
     'janitor is the manager\'s child');

# many releases in a row: every cgroup goes, none is left to the next run
my @many;
for my $i (1 .. 8) {
    my $b = control($m, { op => 'acquire', session => "many$i" });
    push @many, grep { m{/$cg/} } cgroup_dirs($b->{sandbox});
    ok(control($m, { op => 'release', sandbox => $b->{sandbox} })->{ok},
       "release $i");
}
ok(@many >= 8, 'each sandbox had a cgroup');
ok(wait_until(sub { !grep { -d $_ } @many }, 10),
   'all their cgroups are removed');
is(control($m, { op => 'status', sandbox => $a->{sandbox} })->{error}{code},
   'unknown_sandbox', 'a released sandbox is forgotten');

# a sandbox that dies by itself is reaped and its death recorded
$a = control($m, { op => 'acquire', session => 'life2' });
$ch = connect_sock($a->{path});
send_frame($ch, { op => 'exec', code => "import os\nos._exit(7)" });
is(recv_frame($ch), undef, 'channel closes when the sandbox exits');
ok(wait_until(sub {
    !control($m, { op => 'status', sandbox => $a->{sandbox} })->{alive} }),
   'status soon says dead');
$r = control($m, { op => 'status', sandbox => $a->{sandbox} });
is($r->{reason}, 'exited', 'reason exited');
is($r->{exit_code}, 7, 'with its exit code');
ok(!proc_alive($a->{pid}), 'reaped: no zombie');
ok(control($m, { op => 'release', sandbox => $a->{sandbox} })->{ok},
   'releasing a dead sandbox is fine');
my $st = control($m, { op => 'stats' });
is($st->{live}, 0, 'stats: nothing live');
stop_manager($m);

# warm pool and bursts
$m = start_manager('--pool', '2', '--cgroup-name', $cg);
ok(wait_until(sub { control($m, { op => 'stats' })->{idle} == 2 }),
   'pool filled to 2 in the background');
# pool sandboxes are jailed before anyone acquires them
my @pool = keys %{ proc_children($m->{pid}) };
is(scalar @pool, 2, 'two pool processes');
for my $p (@pool) {
    ok(wait_until(sub {
        SandboxUtil::slurp("/proc/$p/status") =~ /^Seccomp:\s+2$/m }),
       "idle pool sandbox $p already runs under seccomp");
    my $status = SandboxUtil::slurp("/proc/$p/status");
    like($status, qr/^NoNewPrivs:\s+1$/m, 'with no_new_privs');
    my ($uid) = $status =~ /^Uid:\s+(\d+)/m;
    isnt($uid, 0, "as an unprivileged uid ($uid)");
}

# five acquires in one write arrive as one event: no refill in between
my $bs = connect_sock($m->{control});
print {$bs} join '', map {
    my $j = json_enc({ op => 'acquire', session => "burst$_" });
    pack('NN', length $j, 0) . $j } 1 .. 5;
$bs->flush;
my @acq = map { recv_frame($bs) } 1 .. 5;
close $bs;
is(scalar(grep { $_->{ok} } @acq), 5, 'a burst of 5 on a pool of 2 succeeds');
is_deeply([map { $_->{warm} ? 1 : 0 } @acq], [1, 1, 0, 0, 0],
          'two from the pool, then cold creation (no queue)');
my %pids = map { $_->{pid} => 1 } @acq;
is(scalar keys %pids, 5, 'five distinct sandboxes');
my $served = 0;
for my $x (@acq) {
    my $c = connect_sock($x->{path});
    $served++ if request($c, { op => 'exec', code => "print('hi')" })
                 ->{stdout} eq "hi\n";
    close $c;
}
is($served, 5, 'every one of them serves');
ok(wait_until(sub { control($m, { op => 'stats' })->{idle} == 2 }),
   'the pool refills after the burst');
$st = control($m, { op => 'stats' });
is($st->{live}, 5, 'five live');
is($st->{warm_acquires}, 2, 'two warm acquires counted');
is($st->{cold_acquires}, 3, 'three cold acquires counted');

# custom limits never take a pool sandbox
$r = control($m, { op => 'acquire', session => 'custom',
                   limits => { memory_mb => 300 } });
ok($r->{ok} && !$r->{warm}, 'custom limits: a cold sandbox');
is($r->{limits}{memory_mb}, 300, 'with those limits');
push @acq, $r;
for my $x (@acq) {
    control($m, { op => 'release', sandbox => $x->{sandbox} });
}
my @idle = keys %{ proc_children($m->{pid}) };
is(scalar @idle, 2, 'after releases only the 2 pool sandboxes remain');

# SIGTERM takes every sandbox along
stop_manager($m);
is(scalar(grep { proc_alive($_) } @idle), 0,
   'manager exit: pool sandboxes gone');

# the manager exits when its parent dies, taking sandboxes with it
pipe(my $rd, my $wr) or die;
my $mid = fork();
if ($mid == 0) {
    close $rd;
    $m = start_manager('--pool', '1', '--cgroup-name', $cg);
    my $x = control($m, { op => 'acquire', session => 'orphan' });
    print {$wr} "$m->{pid} $x->{pid} $m->{dir}\n";
    close $wr;
    sleep 1000;
    exit 0;
}
close $wr;
my $line = <$rd>;
my ($mpid, $spid, $mdir) = split ' ', $line;
ok(proc_alive($mpid) && proc_alive($spid), 'manager and sandbox running');
kill 'KILL', $mid;
waitpid($mid, 0);
ok(wait_until(sub { !proc_alive($mpid) }, 10),
   'manager exits when its parent is killed');
ok(wait_until(sub { !proc_alive($spid) }, 10),
   'and its sandboxes die with it');
ok(wait_until(sub { !-e "$mdir/control.sock" }, 10),
   'it removed its control socket on the way out');
remove_runtime_dir($mdir);

# SIGKILL of the manager itself: sandboxes die too (PDEATHSIG)
$m = start_manager('--pool', '2', '--cgroup-name', $cg);
my $x = control($m, { op => 'acquire', session => 'k1' });
ok(wait_until(sub { control($m, { op => 'stats' })->{idle} == 2 }),
   'pool ready');
my @all = ($x->{pid}, keys %{ proc_children($m->{pid}) });
my $jk = janitor_of($m->{pid});
ok($jk, 'janitor running');
kill 'KILL', $m->{pid};
waitpid($m->{pid}, 0);
delete $m->{pid};
ok(wait_until(sub { !grep { proc_alive($_) } @all }, 10),
   'SIGKILL of the manager: every sandbox dies');
ok(wait_until(sub { !proc_alive($jk) }, 10), 'and the janitor too');
stop_manager($m);

# the next manager with that cgroup name removes the killed one's cgroups
my @stale = grep { m{/$cg/} } map { cgroup_dirs($_) } ($x->{sandbox});
$m = start_manager('--pool', '0', '--cgroup-name', $cg);
is(scalar(grep { -d $_ } @stale), 0,
   'leftover sandbox cgroups removed at start');
stop_manager($m);

done_testing();
