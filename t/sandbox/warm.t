# Warm-up without a trace.  The zygote runs the runtime's own cells before
# it forks (bytecode specialisation, first-use caches), and every pool
# sandbox runs one more cell while it waits (its pages are copied then,
# not on the session's first cell).  A session must see neither: no
# variable, no cell number, no source, no answer or state left over.

use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use SandboxUtil;
use Test::More;
use Time::HiRes qw( sleep );

require_root();

# page faults of a process so far (field 10 of /proc/PID/stat)
sub minflt {
    my ($pid) = @_;
    my $st = slurp("/proc/$pid/stat") // return undef;
    $st =~ s/^.*\) //s;
    return (split / /, $st)[7];
}

my @probe = (
    "print(sorted(k for k in globals() if not k.startswith('_')))",
    "print(answer, state)",
    "import linecache\n"
        . "print(sorted(k for k in linecache.cache if k.startswith('<')))",
    "1 / 0",
);

# what a session sees in its first cells, and the faults of its first one
sub first_cells {
    my ($m, $session) = @_;
    my $a = control($m, { op => 'acquire', session => $session });
    my $ch = connect_sock($a->{path});
    my $f0 = minflt($a->{pid});
    my @r = (request($ch, { op => 'exec', code => 'y = 2' }));
    my $faults = minflt($a->{pid}) - $f0;
    push @r, map { request($ch, { op => 'exec', code => $_ }) } @probe;
    push @r, request($ch, { op => 'ping' });
    close $ch;
    control($m, { op => 'release', sandbox => $a->{sandbox} });
    return ($a, $faults, @r);
}

sub no_trace {
    my ($what, $first, $names, $ans, $lc, $err, $ping) = @_;
    is($first->{status}, 'ok', "$what: first cell ok");
    unlike($names->{stdout}, qr/'x'/,
           "$what: no variable of a warm-up cell");
    like($names->{stdout}, qr/^\['FINAL', 'FINAL_VAR', 'SHOW_VARS', /,
         "$what: the reserved names are there");
    like($names->{stdout}, qr/'y'\]$/m, "$what: and the session's own");
    is($ans->{stdout}, "{'content': '', 'ready': False} {}\n",
       "$what: answer and state start empty");
    is($lc->{stdout}, "[]\n", "$what: no cell source kept for linecache");
    like($err->{error}{traceback}, qr/<cell-5>/,
         "$what: cells are numbered from 1 (the fifth is <cell-5>)");
    is($ping->{cells}, 5, "$what: ping counts only the session's cells");
}

# a pool sandbox: forked from the warmed zygote, then primed
my $m = start_manager('--pool', '1');
ok(wait_until(sub { control($m, { op => 'stats' })->{idle} == 1 }),
   'pool filled');
# "idle" counts it from the fork on: wait for it to be done (its faults
# stop growing once it is primed and waits in poll())
my ($pooled) = keys %{ proc_children($m->{pid}) };
my $last = -1;
ok(wait_until(sub {
    my $now = minflt($pooled) // -2;
    my $same = ($now == $last);
    $last = $now;
    sleep 0.2;
    $same;
}, 20), 'the pool sandbox is ready');
my ($a, $primed_faults, @r) = first_cells($m, 'warm1');
ok($a->{warm}, 'a pool (primed) sandbox');
no_trace('primed', @r);
stop_manager($m);

# a cold sandbox: forked from the warmed zygote, not primed
$m = start_manager('--pool', '0');
my $cold_faults;
($a, $cold_faults, @r) = first_cells($m, 'cold1');
ok(!$a->{warm}, 'a cold sandbox');
no_trace('cold', @r);
stop_manager($m);

# the prime did its work: the primed sandbox's first cell copies (far)
# fewer pages than a cold one's; counts, not times, so no flakiness
ok(defined $primed_faults && defined $cold_faults
   && $primed_faults * 3 < $cold_faults,
   "primed first cell: $primed_faults page faults,"
   . " cold first cell: $cold_faults")
    or diag "faults primed $primed_faults cold $cold_faults";

done_testing();
