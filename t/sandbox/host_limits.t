# Limits the manager enforces from outside a sandbox, where the code
# cannot reach them: the control ops kill, watch and unwatch.  Each test
# runs a cell that switches off everything it can of the in-sandbox time
# limits (blocks their signals, disarms the wall timer, swallows every
# exception) and then spins, so only the manager can stop it.

use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use SandboxUtil;
use Test::More;
use Time::HiRes qw( sleep time );

require_root();

my $m = start_manager('--pool', '1');

# a cell that leaves the in-sandbox steps nothing to act on
my $HOSTILE = <<'PY';
import signal
for s in (signal.SIGALRM, signal.SIGXCPU, signal.SIGUSR1):
    try:
        signal.signal(s, signal.SIG_IGN)
    except OSError:
        pass
signal.pthread_sigmask(signal.SIG_BLOCK,
                       {signal.SIGALRM, signal.SIGXCPU, signal.SIGUSR1})
signal.setitimer(signal.ITIMER_REAL, 0)
while True:
    try:
        while True:
            pass
    except BaseException:
        pass
PY

# a lifetime CPU cap, so that a failing run leaves no endless spinner
my %LIMITS = (wall_ms => 1000, cpu_s => 1, session_cpu_s => 120);

sub acquire {
    my ($session, %limits) = @_;
    my $r = control($m, { op => 'acquire', session => $session,
                          limits => { %LIMITS, %limits } });
    die 'acquire: ' . json_enc($r) unless $r->{ok};
    return $r;
}

sub status { control($m, { op => 'status', sandbox => $_[0]{sandbox} }) }

# clock ticks of CPU the sandbox process has used (all its threads)
sub cpu_ticks {
    my ($pid) = @_;
    my $t = slurp("/proc/$pid/stat") or return undef;
    $t =~ s/^.*\)\s+//s;
    my @f = split /\s+/, $t;
    return $f[11] + $f[12];       # utime, stime (fields 14, 15)
}

# no process, no zombie, no cgroup left of the sandbox
sub gone {
    my ($sb) = @_;
    return wait_until(sub {
        !proc_alive($sb->{pid}) && !cgroup_dirs($sb->{sandbox})
    }, 10);
}

# ---------------------------------------------------------------------
# kill

my $a = acquire('kill-a');
my $ch = connect_sock($a->{path});
send_frame($ch, { op => 'exec', code => $HOSTILE });

# past its wall limit and its 2 s grace, and past its CPU limit: still on
my $t0 = cpu_ticks($a->{pid}) // 0;
sleep 3.5;
my $st = status($a);
ok($st->{alive}, 'kill: the hostile cell outlived every in-sandbox limit');
ok((cpu_ticks($a->{pid}) // 0) > $t0, 'kill: ... and is burning CPU');

my $r = control($m, { op => 'kill', sandbox => $a->{sandbox},
                      reason => 'wall_limit', seq => 7 });
is_deeply($r, { ok => JSON::PP::true, killed => JSON::PP::true, seq => 7 },
          'kill: {"ok":true,"killed":true}');
$st = status($a);
ok(!$st->{alive}, 'kill: status says dead at once');
is($st->{reason}, 'wall_limit', 'kill: with the reason given');
ok(wait_until(sub { defined status($a)->{signal} }, 10),
   'kill: the manager reaped it');
is(status($a)->{signal}, 9, 'kill: it died of SIGKILL');
is(status($a)->{reason}, 'wall_limit', 'kill: reason kept after the reap');
ok(gone($a), 'kill: no process, zombie or cgroup of it is left');
is(recv_frame($ch), undef, 'kill: the host sees its channel close');
close $ch;

$r = control($m, { op => 'kill', sandbox => $a->{sandbox},
                   reason => 'cpu_limit' });
ok($r->{ok} && JSON::PP::is_bool($r->{killed}) && !$r->{killed},
   'kill: a dead sandbox answers "killed":false');
is(status($a)->{reason}, 'wall_limit', 'kill: ... and keeps its reason');
ok(!control($m, { op => 'interrupt', sandbox => $a->{sandbox} })->{sent},
   'interrupt: nothing sent to a killed sandbox');

is(control($m, { op => 'kill', sandbox => 'ffffffffffffffffffff',
                 reason => 'wall_limit' })->{error}{code},
   'unknown_sandbox', 'kill: unknown sandbox');
for my $bad (undef, 'oom', 'killed', '', 1) {
    my $req = { op => 'kill', sandbox => $a->{sandbox} };
    $req->{reason} = $bad if defined $bad;
    is(control($m, $req)->{error}{code}, 'bad_request',
       'kill: reason ' . (defined $bad ? "'$bad'" : 'missing')
       . ' is a bad request');
}
ok(control($m, { op => 'release', sandbox => $a->{sandbox} })->{ok},
   'kill: release frees the record');

# a killed sandbox that was never reaped does not linger in list
ok(!grep({ $_->{sandbox} eq $a->{sandbox} }
         @{ control($m, { op => 'list' })->{sandboxes} }),
   'list: a killed sandbox is not listed');

# ---------------------------------------------------------------------
# watch: the manager ends a spinner once it used cpu_ms more CPU

my $w = acquire('watch-w', wall_ms => 60000, cpu_s => 60);
$ch = connect_sock($w->{path});
send_frame($ch, { op => 'exec', code => $HOSTILE });
ok(wait_until(sub { (cpu_ticks($w->{pid}) // 0) > 0 }, 10),
   'watch: the cell spins');

my $hz = 100;
my $budget_ms = 1500;
my $base = cpu_ticks($w->{pid});
$r = control($m, { op => 'watch', sandbox => $w->{sandbox},
                   cpu_ms => $budget_ms });
is_deeply($r, { ok => JSON::PP::true }, 'watch: {"ok":true}');

my $last = $base;
ok(wait_until(sub {
    my $t = cpu_ticks($w->{pid});
    $last = $t if defined $t && status($w)->{alive};
    !status($w)->{alive};
}, 60), 'watch: the spinner was killed');
is(status($w)->{reason}, 'cpu_limit', 'watch: with reason cpu_limit');
my $used_ms = ($last - $base) * 1000 / $hz;
note("watch: CPU seen used after the watch: ${used_ms} ms "
     . "(budget $budget_ms ms)");
ok($used_ms >= $budget_ms / 2,
   "watch: not before it used CPU (at least ${used_ms} ms seen)");
ok(gone($w), 'watch: no process, zombie or cgroup is left burning CPU');
close $ch;
control($m, { op => 'release', sandbox => $w->{sandbox} });

# ---------------------------------------------------------------------
# watch: a sandbox that sleeps uses no CPU and is not killed

my $s = acquire('watch-s', wall_ms => 10000, cpu_s => 10);
$ch = connect_sock($s->{path});
send_frame($ch, { op => 'exec',
                  code => "import time\ntime.sleep(1.5)\nprint('slept')" });
$r = control($m, { op => 'watch', sandbox => $s->{sandbox}, cpu_ms => 300 });
ok($r->{ok}, 'watch: a sleeping cell');
$r = recv_frame($ch);
is($r && $r->{stdout}, "slept\n", 'watch: the sleeper finished its cell');
ok(status($s)->{alive}, 'watch: and was not killed');

# a second watch replaces the first; unwatch ends one

sub spin_cell {
    my ($ms) = @_;
    return request($ch, { op => 'exec', code =>
        "import time\nt = time.process_time()\n"
        . "while time.process_time() - t < $ms / 1000: pass\n"
        . "print('spun')" });
}

ok(control($m, { op => 'watch', sandbox => $s->{sandbox}, cpu_ms => 300 })
   ->{ok}, 'watch 300 ms');
ok(control($m, { op => 'watch', sandbox => $s->{sandbox},
                 cpu_ms => 3600000 })->{ok}, 'watch again, 1 h');
$r = spin_cell(1000);
is($r && $r->{stdout}, "spun\n",
   'watch: the second watch replaced the first (1 s of CPU survived)');
ok(status($s)->{alive}, 'watch: still alive');

ok(control($m, { op => 'watch', sandbox => $s->{sandbox}, cpu_ms => 300 })
   ->{ok}, 'watch 300 ms');
ok(control($m, { op => 'unwatch', sandbox => $s->{sandbox} })->{ok},
   'unwatch');
$r = spin_cell(1000);
is($r && $r->{stdout}, "spun\n", 'unwatch: 1 s of CPU survived');
ok(status($s)->{alive}, 'unwatch: still alive');
ok(control($m, { op => 'unwatch', sandbox => $s->{sandbox} })->{ok},
   'unwatch without a watch is ok');

# the same cell under a watch that stays: killed
ok(control($m, { op => 'watch', sandbox => $s->{sandbox}, cpu_ms => 300 })
   ->{ok}, 'watch 300 ms, kept');
$r = spin_cell(5000);
ok(!defined $r, 'watch: the cell did not finish');
is(status($s)->{reason}, 'cpu_limit', 'watch: killed for cpu_limit');
close $ch;

# ---------------------------------------------------------------------
# errors

is(control($m, { op => 'watch', sandbox => 'ffffffffffffffffffff',
                 cpu_ms => 100 })->{error}{code},
   'unknown_sandbox', 'watch: unknown sandbox');
is(control($m, { op => 'unwatch', sandbox => 'ffffffffffffffffffff' })
   ->{error}{code}, 'unknown_sandbox', 'unwatch: unknown sandbox');
for my $bad (undef, 0, -5, '100', 1.5, 86400001) {
    my $req = { op => 'watch', sandbox => $s->{sandbox} };
    $req->{cpu_ms} = $bad if defined $bad;
    is(control($m, $req)->{error}{code}, 'bad_request',
       'watch: cpu_ms ' . (defined $bad ? "'$bad'" : 'missing')
       . ' is a bad request');
}
ok(control($m, { op => 'watch', sandbox => $s->{sandbox}, cpu_ms => 100 })
   ->{ok}, 'watch: a dead sandbox answers ok');
control($m, { op => 'release', sandbox => $s->{sandbox} });

# ---------------------------------------------------------------------
# the manager is fine, and nothing is left

ok(control($m, { op => 'ping' })->{ok}, 'the manager still serves');
my $stats = control($m, { op => 'stats' });
is($stats->{live}, 0, 'no live sandbox left');

stop_manager($m);

done_testing();
