# conf/log-json.conf: the JSON access-log format "rlm_json".  The
# configuration `make run` writes (which includes the snippet) gets one
# more line, `access_log logs/access.json rlm_json;`, as an operator
# would add it; then a completion (the demo model, with an API key so
# that there is a tenant) and a health check must each write one line
# that parses as a JSON object with every key of the format.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/run_lib";

use File::Temp qw(tempdir);
use JSON::PP qw(encode_json decode_json);
use Test::More;

use RlmRun;

my $why = RlmRun::missing();
plan skip_all => $why if $why;

my $keys_dir = tempdir('rlm-logjson-XXXXXX', TMPDIR => 1, CLEANUP => 1);
my $keys = "$keys_dir/keys";
open my $fh, '>', $keys or die "$keys: $!";
print $fh "sk-logjson-0001 team-log\n";
close $fh;
# the workers (user nobody) read it
chmod 0755, $keys_dir;
chmod 0644, $keys;

my $port = RlmRun::free_port_pair();
my $run = RlmRun::make_prefix(PORT => $port, RLM_KEYS_FILE => $keys);

# the operator's line, right after the include that defines the format
my $conf = RlmRun::slurp("$run/conf/rlm.conf");
ok($conf =~ s/^(\s*include\s+log-json\.conf;\n)/$1    access_log logs\/access.json rlm_json;\n/m,
   'rlm.conf includes log-json.conf');
open $fh, '>', "$run/conf/rlm.conf" or die $!;
print $fh $conf;
close $fh;

RlmRun::start_nginx($run, $port);

my $c = RlmRun::request('127.0.0.1', $port, 'POST', '/v1/chat/completions',
    { 'Content-Type' => 'application/json',
      'Authorization' => 'Bearer sk-logjson-0001' },
    encode_json({
        model => 'rlm-demo',
        messages => [ { role => 'user',
                        content => 'What is the vault code?' } ],
        context => "line one\nthe vault code is 7-4-1-9\nline three",
    }));
is($c->{status}, 200, 'completion through the demo model: 200')
    or diag($c->{body});
my $sid = $c->{headers}{'x-rlm-session-id'} // '';
ok($sid ne '', 'the completion has a session');

my $h = RlmRun::request('127.0.0.1', $port, 'GET', '/healthz');
is($h->{status}, 200, '/healthz: 200');

# the log phase may end just after the answer: wait for both lines
my @lines;
for (1 .. 50) {
    @lines = grep { length } split /\n/,
             (RlmRun::slurp("$run/logs/access.json") // '');
    last if @lines >= 2;
    select(undef, undef, undef, 0.1);
}

# the /healthz probe of start_nginx comes first
my @objs;
for my $line (@lines) {
    my $o = eval { decode_json($line) };
    ok(ref $o eq 'HASH', 'a line of access.json is a JSON object')
        or diag("$@: $line");
    push @objs, $o if ref $o eq 'HASH';
}

my @keys = qw( time request_id remote_addr server_port method uri status tenant
               session route model iterations tokens sandbox_ms
               cell_status bytes_sent request_time );

# the API's lines (the demo model's server, on the next port, logs too)
my @api = grep { ($_->{server_port} // 0) == $port } @objs;
my ($comp) = grep { ($_->{uri} // '') eq '/v1/chat/completions' } @api;
my ($health) = grep { ($_->{uri} // '') eq '/healthz' } reverse @api;

ok($comp, 'the completion wrote a line') or diag(join "\n", @lines);
ok($health, 'the health check wrote a line');

SKIP: {
    skip 'no completion line', 11 unless $comp;

    is_deeply([ grep { !exists $comp->{$_} } @keys ], [],
              'completion line: every key present');
    is($comp->{status}, 200, '... status 200, a number');
    is($comp->{tenant}, 'team-log', '... the key\'s tenant');
    is($comp->{session}, $sid, '... the X-RLM-Session-Id of the answer');
    like($comp->{request_id}, qr/^[0-9a-f]{32}$/, '... a request id');
    like($comp->{time}, qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d/,
         '... ISO 8601 time');
    ok(defined $comp->{iterations} && $comp->{iterations} >= 1,
       '... iterations, a number >= 1')
        or diag(explain $comp);
    ok(defined $comp->{tokens} && $comp->{tokens} > 0,
       '... tokens, a number > 0');
    ok(defined $comp->{sandbox_ms} && $comp->{sandbox_ms} >= 0,
       '... sandbox_ms, a number');
    ok(!ref $comp->{request_time} && $comp->{request_time} >= 0,
       '... request_time, a number');
    ok(!ref $comp->{model}, '... model, a string');
}

SKIP: {
    skip 'no health line', 4 unless $health;

    is_deeply([ grep { !exists $health->{$_} } @keys ], [],
              'health line: every key present');
    is($health->{tenant}, '', '... no tenant: ""');
    ok(!defined $health->{iterations} && !defined $health->{tokens},
       '... no completion: iterations and tokens are null');
    is($health->{status}, 200, '... status 200');
}

done_testing();
