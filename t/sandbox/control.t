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
