# Callbacks from code to the host: llm_query, llm_query_batched, rlm_query,
# rlm_query_batched; ordering, errors, and the wall timer pausing while the
# host thinks.

use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use SandboxUtil;
use Test::More;
use Time::HiRes qw( sleep );

require_root();

my $r = ctl_run(cells(
    "a = llm_query('one')\nb = rlm_query('two', model='m2')\nprint(a, b)",
    "print(llm_query_batched(['p1', 'p2', 'p3']))",
    "print(rlm_query_batched(['q1']))",
), '--reply', 'R[{prompt}]', '--show-calls');

my @calls = grep { $_->{type} eq 'call' } @$r;
my @res = grep { $_->{type} eq 'result' } @$r;
is(scalar @calls, 4, 'four call frames');
is($calls[0]{fn}, 'llm_query', 'first call llm_query');
is($calls[0]{args}{prompt}, 'one', 'prompt sent');
is($calls[1]{fn}, 'rlm_query', 'then rlm_query, in code order');
is($calls[1]{args}{model}, 'm2', 'model sent');
ok($calls[1]{id} > $calls[0]{id}, 'call ids increase');
is($calls[2]{fn}, 'llm_query_batched', 'batched call');
is_deeply($calls[2]{args}{prompts}, ['p1', 'p2', 'p3'],
          'all prompts, in order');
is($calls[3]{fn}, 'rlm_query_batched', 'rlm batched call');
is($res[0]{stdout}, "R[one] R[two]\n", 'results returned to the code');
is($res[1]{stdout}, "['R[p1]', 'R[p2]', 'R[p3]']\n", 'batched order kept');
is($res[2]{stdout}, "['R[q1]']\n", 'rlm_query_batched result');

# errors: ok:false raises for single calls; per-item errors in batches
$r = ctl_run(cells(
    "try:\n    llm_query('x')\nexcept RuntimeError as e:\n    print('E', e)",
    "print(llm_query_batched(['a', 'b', 'c']))",
    "llm_query('y')",
    "print(llm_query_batched(['z']))",
), '--replies', json_enc([
    { ok => JSON::PP::false, error => 'rate limited' },
    { ok => JSON::PP::true, result => [
        { ok => JSON::PP::true, result => 'A' },
        { ok => JSON::PP::false, error => 'upstream 500' },
        { ok => JSON::PP::true, result => 'C' } ] },
    { ok => JSON::PP::false, error => 'refused' },
    { ok => JSON::PP::false, error => 'budget' },
]));
is($r->[0]{stdout}, "E rate limited\n", 'ok:false raises RuntimeError');
is($r->[1]{stdout}, "['A', 'Error: upstream 500', 'C']\n",
   'a failed batch item is an "Error: " string, order kept');
is($r->[2]{status}, 'error', 'an uncaught callback error fails the cell');
is($r->[2]{error}{ename}, 'RuntimeError', 'as RuntimeError');
is($r->[2]{error}{evalue}, 'refused', 'with the host message');
is($r->[3]{error}{evalue}, 'budget', 'a whole failed batch raises');

# direct protocol: the wall timer pauses while the host answers
my $m = start_manager('--pool', '1');
my $acq = control($m, { op => 'acquire', session => 'cb1' });
my $ch = connect_sock($acq->{path});
my ($res, $calls) = channel_request($ch,
    { op => 'exec', code => "r = llm_query('slow')\nprint(r)",
      timeout_ms => 300 },
    sub { sleep 1.0;
          return { op => 'reply', id => $_[0]{id}, ok => JSON::PP::true,
                   result => 'late but fine' } });
is($res->{status}, 'ok', 'a slow host reply does not count as cell time');
is($res->{stdout}, "late but fine\n", 'reply delivered after 1 s');

# a reply with the wrong id is refused inside the sandbox
($res) = channel_request($ch, { op => 'exec', code => "llm_query('q')" },
    sub { return { op => 'reply', id => 999, ok => JSON::PP::true,
                   result => 'x' } });
is($res->{status}, 'error', 'mismatched reply id is an error');
like($res->{error}{evalue}, qr/does not match/, 'explained');

# host disconnects mid-call: the sandbox takes the next connection
send_frame($ch, { op => 'exec', code => "llm_query('gone')" });
my $f = recv_frame($ch);
is($f->{type}, 'call', 'call frame before the host vanished');
close $ch;
$ch = connect_sock($acq->{path});
$res = request($ch, { op => 'exec', code => "print(r)" });
is($res->{stdout}, "late but fine\n",
   'next connection served, namespace intact');
close $ch;
control($m, { op => 'release', sandbox => $acq->{sandbox} });
stop_manager($m);

done_testing();
