# The control protocol: versions, errors for bad frames, unknown ops, bad
# session ids and limits, unknown sandboxes, ordering, caps; and protocol
# errors on a sandbox channel.

use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use SandboxUtil;
use Test::More;
use Time::HiRes qw( sleep time );

require_root();

my $m = start_manager('--pool', '1', '--max-sandboxes', '3',
                      '--max-memory-mb', '1600');

my $r = control($m, { op => 'hello', version => 1 });
ok($r->{ok}, 'hello version 1');
is($r->{version}, 1, 'speaks version 1');
is($r->{pid}, $m->{pid}, 'tells its pid');
$r = control($m, { op => 'hello', version => 2 });
is($r->{error}{code}, 'version', 'other versions refused');
ok(control($m, { op => 'ping' })->{ok}, 'ping');

# list: the live sandboxes with their session labels and ages

# one list request on a fresh connection: (decoded reply, raw JSON text)
sub list_raw {
    my ($req) = @_;
    my $ls = connect_sock($m->{control});
    send_frame($ls, $req);
    my ($jl, $bl) = unpack('NN', SandboxUtil::read_n($ls, 8));
    my $text = SandboxUtil::read_n($ls, $jl);
    close $ls;
    return ($text, $jl);
}

sub listed {
    my ($reply) = @_;
    return { map { $_->{sandbox} => $_ } @{ $reply->{sandboxes} || [] } };
}

ok(wait_until(sub { control($m, { op => 'stats' })->{idle} >= 1 }, 30),
   'list: the pool holds an idle sandbox');
$r = control($m, { op => 'list', seq => 'l1' });
ok($r->{ok}, 'list on a fresh manager');
is($r->{seq}, 'l1', 'list echoes seq');
is(ref $r->{sandboxes}, 'ARRAY', 'sandboxes is an array');
is(scalar @{ $r->{sandboxes} || [1] }, 0, 'idle pool sandboxes are not listed');
ok(JSON::PP::is_bool($r->{truncated}) && !$r->{truncated},
   'an empty list is not truncated');

my $t_acq = Time::HiRes::clock_gettime(Time::HiRes::CLOCK_MONOTONIC());
my $la = control($m, { op => 'acquire', session => 'listA' });
my $lb = control($m, { op => 'acquire', session => 'listB',
                       limits => { wall_ms => 3000 } });
ok($la->{ok} && $lb->{ok}, 'list: acquire A (warm) and B (cold)');
my ($text) = list_raw({ op => 'list' });
my $t_list = Time::HiRes::clock_gettime(Time::HiRes::CLOCK_MONOTONIC());
$r = json_dec($text);
my $got = listed($r);
is_deeply([sort keys %$got], [sort $la->{sandbox}, $lb->{sandbox}],
          'both live sandboxes listed, ids as acquire returned them');
is($got->{$la->{sandbox}}{session}, 'listA', 'A listed with its label');
is($got->{$lb->{sandbox}}{session}, 'listB', 'B listed with its label');
is(scalar(() = $text =~ /"live_ms":\d+[,}]/g), 2,
   'live_ms is a non-negative JSON integer for both');
is($r->{live}, 2, 'live counts both');
# both were acquired after $t_acq and listed before $t_list: their ages
# cannot be larger (a bound by causality, not a timing guess)
for my $x ($la, $lb) {
    my $ms = $got->{$x->{sandbox}}{live_ms} // -1;
    ok($ms >= 0 && $ms <= ($t_list - $t_acq) * 1000 + 1,
       "live_ms $ms counts from the acquire");
}
ok(!$r->{truncated}, 'two sandboxes are not truncated');

# the entries never push a reply past the control frame limit: with a
# seq that fills nearly all of it the list is cut short and says so; the
# next list resumes with the sandbox left out (a seq is echoed whole, as
# by every op, so the largest tried leaves the reply its ~100 bytes)
my $max = 1024 * 1024;
my $head = '{"op":"list","seq":"';
my $seqmax = $max - 300;
my ($jl, $one_len, $largest);
$largest = 0;
for (my $len = $seqmax; $len > $seqmax - 4000; $len -= 20) {
    ($text, $jl) = list_raw($head . ('x' x $len) . '"}');
    $largest = $jl if $jl > $largest;
    my $n = () = $text =~ /"sandbox":"/g;
    if ($len == $seqmax) {
        ok(($text =~ /"truncated":true/ ? 1 : 0) == ($n < 2 ? 1 : 0),
           "largest seq: $n of 2 listed, truncated says so");
    }
    if ($n > 0) {
        $one_len = $len - 20;
        last;
    }
}
ok(defined $one_len, 'a shorter seq leaves room for entries');
ok($largest > $max - 400 && $largest <= $max,
   "replies up to $largest bytes, within 1 MiB");
my %seen;
for my $round (1, 2) {
    ($text, $jl) = list_raw($head . ('x' x ($one_len // 0)) . '"}');
    my @ids = $text =~ /"sandbox":"([0-9a-f]{20})"/g;
    ok($jl <= $max && @ids == 1 && $text =~ /"truncated":true/,
       "room for one of two: one entry, truncated, within 1 MiB ($round)");
    $seen{$_}++ for @ids;
}
is_deeply([sort keys %seen], [sort $la->{sandbox}, $lb->{sandbox}],
          'two truncated lists in a row cover both sandboxes');

ok(control($m, { op => 'release', sandbox => $la->{sandbox} })->{ok},
   'list: release A');
$r = control($m, { op => 'list' });
$got = listed($r);
is_deeply([keys %$got], [$lb->{sandbox}], 'only B listed after A released');
my ($ctl_out, $ctl_rc) = SandboxUtil::run_cmd([$CTL, 'list', '--manager',
                                               $m->{control}]);
is($ctl_rc, 0, 'rlm-sandboxctl list exits 0');
is_deeply([keys %{ listed(json_dec($ctl_out)) }], [$lb->{sandbox}],
          'rlm-sandboxctl list prints the reply');
my $age = $got->{$lb->{sandbox}}{live_ms};
sleep 1.2;
$got = listed(control($m, { op => 'list' }));
ok(defined $age && defined $got->{$lb->{sandbox}}
   && $got->{$lb->{sandbox}}{live_ms} - $age >= 1000,
   'live_ms grew by at least the 1.2 s slept');
ok(control($m, { op => 'release', sandbox => $lb->{sandbox} })->{ok},
   'list: release B');
$r = control($m, { op => 'list' });
is(scalar @{ $r->{sandboxes} || [1] }, 0, 'empty again after releases');
$r = control($m, { op => 'lists' });
is($r->{error}{code}, 'bad_request', 'a near-miss op is still unknown');

# well-formed but wrong requests: an error, the connection stays
my $s = connect_sock($m->{control});
$r = request($s, { op => 'frobnicate' });
is($r->{error}{code}, 'bad_request', 'unknown op');
like($r->{error}{message}, qr/frobnicate/, 'names the op');
$r = request($s, { nop => 1 });
is($r->{error}{code}, 'bad_request', 'request without op');
ok(request($s, { op => 'ping' })->{ok}, 'connection still usable');

for my $bad (undef, '', 'x' x 65, 'a/b', '../etc', "sp ace", 42) {
    $r = request($s, { op => 'acquire', session => $bad });
    is($r->{error}{code}, 'bad_request',
       'bad session id refused: ' . (defined $bad ? "'$bad'" : 'missing'));
}
for my $bad ({ nope => 1 }, { wall_ms => 'x' }, { memory_mb => 1 },
             { cpu_s => 0 }, [1]) {
    $r = request($s, { op => 'acquire', session => 'abc', limits => $bad });
    is($r->{error}{code}, 'bad_request', 'bad limits refused: '
       . json_enc($bad));
}
for my $op (qw( release status )) {
    $r = request($s, { op => $op, sandbox => '0000000000000999ffff' });
    is($r->{error}{code}, 'unknown_sandbox', "$op of an unknown sandbox");
    $r = request($s, { op => $op });
    is($r->{error}{code}, 'unknown_sandbox', "$op without a sandbox id");
}

# pipelined requests are answered in order, seq echoed
send_frame($s, { op => 'ping', seq => 1 });
send_frame($s, { op => 'stats', seq => 2 });
send_frame($s, { op => 'frob', seq => 3 });
is(recv_frame($s)->{seq}, 1, 'first reply first');
my $st = recv_frame($s);
is($st->{seq}, 2, 'second reply second');
ok(defined $st->{live} && defined $st->{idle}, 'stats has live and idle');
is(recv_frame($s)->{seq}, 3, 'errors keep their place');
close $s;

# malformed frames: one error, then the manager closes the connection
for my $case (['not JSON', pack('NN', 5, 0) . '{nope'],
              ['not an object', pack('NN', 3, 0) . '[1]'],
              ['zero length', pack('NN', 0, 0)],
              ['oversized', pack('NN', 2 * 1024 * 1024, 0)],
              ['blob on control', pack('NN', 2, 4) . '{}abcd']) {
    my ($name, $bytes) = @$case;
    $s = connect_sock($m->{control});
    print {$s} $bytes;
    $s->flush;
    $r = recv_frame($s);
    is($r->{error}{code}, 'bad_request', "$name: error reply");
    is(recv_frame($s), undef, "$name: connection closed");
    close $s;
}

# a client stuck mid-frame does not stall anyone else
my $stuck = connect_sock($m->{control});
print {$stuck} pack('NN', 100, 0) . '{"op":';
$stuck->flush;
ok(control($m, { op => 'ping' })->{ok}, 'others served past a stuck client');

# caps: max sandboxes and memory
my @sb;
for my $i (1 .. 3) {
    $r = control($m, { op => 'acquire', session => "cap$i" });
    push @sb, $r if $r->{ok};
}
is(scalar @sb, 3, 'three sandboxes fit');
$r = control($m, { op => 'acquire', session => 'cap4' });
is($r->{error}{code}, 'limit', 'the fourth hits --max-sandboxes');
ok(control($m, { op => 'release', sandbox => $sb[0]{sandbox} })->{ok},
   'release one');
$r = control($m, { op => 'acquire', session => 'cap5',
                   limits => { memory_mb => 1024 } });
is($r->{error}{code}, 'limit', 'memory cap: 2 x 512 + 1024 > 1600');
$r = control($m, { op => 'acquire', session => 'cap6',
                   limits => { memory_mb => 512 } });
ok($r->{ok}, 'within the memory cap');
push @sb, $r;
close $stuck;

# protocol errors on a sandbox channel
my $ch = connect_sock($sb[1]{path});
$r = request($ch, { op => 'nope' });
is($r->{status}, 'error', 'unknown channel op is an error result');
is($r->{error}{ename}, 'ProtocolError', 'ProtocolError');
$r = request($ch, '{bad json');
is($r->{error}{ename}, 'ProtocolError', 'bad JSON on the channel');
$r = request($ch, { op => 'exec' });
is($r->{error}{ename}, 'ProtocolError', 'exec without code');
$r = request($ch, { op => 'exec', code => 'v = 5', seq => 'abc' });
is($r->{seq}, 'abc', 'seq echoed on the channel');
print {$ch} pack('NN', 0, 0);
$ch->flush;
$r = recv_frame($ch);
is($r->{error}{ename}, 'ProtocolError', 'zero-length frame refused');
is(recv_frame($ch), undef, 'and the channel connection closed');
close $ch;
$ch = connect_sock($sb[1]{path});
$r = request($ch, { op => 'exec', code => 'print(v)' });
is($r->{stdout}, "5\n", 'a new connection continues the session');
$r = request($ch, { op => 'ping' });
is($r->{pid}, 1, 'the sandbox is pid 1 of its own pid namespace');
close $ch;

# interrupt: only a cell whose host closed its connection is stopped
$ch = connect_sock($sb[1]{path});
send_frame($ch, { op => 'exec', timeout_ms => 20000,
                  code => "import time\nt = time.time()\n"
                          . "while time.time() - t < 1.0: pass\nw = 'done'" });
sleep 0.3;
$r = control($m, { op => 'interrupt', sandbox => $sb[1]{sandbox} });
ok($r->{ok} && $r->{sent}, 'interrupt: signal sent to a live sandbox');
$r = recv_frame($ch);
is($r->{status}, 'ok', 'a cell whose connection is open is left alone');
close $ch;

$ch = connect_sock($sb[1]{path});
send_frame($ch, { op => 'exec', timeout_ms => 20000,
                  code => "kept = 'yes'\nwhile True: pass" });
sleep 0.3;
close $ch;
$r = control($m, { op => 'interrupt', sandbox => $sb[1]{sandbox} });
ok($r->{sent}, 'interrupt after the host hung up');
$ch = connect_sock($sb[1]{path});
my $t0 = time;
$r = request($ch, { op => 'exec', code => 'print(kept, w)' });
is($r->{stdout}, "yes done\n",
   'the abandoned cell stopped; the interpreter kept its variables');
ok(time - $t0 < 10, 'well before the cell timeout of 20 s');
close $ch;
is(control($m, { op => 'interrupt', sandbox => 'ffffffffffffffffffff' })
       ->{error}{code}, 'unknown_sandbox', 'interrupt: unknown sandbox');

for my $x (@sb[1 .. $#sb]) {
    control($m, { op => 'release', sandbox => $x->{sandbox} });
}
stop_manager($m);

done_testing();
