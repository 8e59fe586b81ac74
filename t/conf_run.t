# `make run` with a real provider: the configuration `make run` writes
# with RLM_UPSTREAM_URL, RLM_MODEL and RLM_SUB_MODEL, run against a
# scripted OpenAI-compatible upstream (t/lib/mock_llm.lua in a second
# nginx), checked for what a new user meets on day one:
#
#   * llm_query() and child loops (rlm_query) go to RLM_SUB_MODEL;
#   * GET /v1/models lists RLM_MODEL and RLM_SUB_MODEL;
#   * trajectories are written and served, and the viewer page is there;
#   * URIs outside the API, methods a location does not serve and
#     nginx's own errors answer in the JSON error envelope;
#   * a Content-Length over the body cap gets 413 (envelope) without
#     the body being sent.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/run_lib";

use JSON::PP qw(encode_json decode_json);
use Test::More;

use RlmRun;

my $why = RlmRun::missing();
plan skip_all => $why if $why;

my ($mock, $mport) = RlmRun::start_mock();

my $port = RlmRun::free_port_pair();
my $run = RlmRun::make_prefix(PORT => $port,
                              RLM_UPSTREAM_URL => "$mock/v1",
                              RLM_MODEL => 'script:root',
                              RLM_SUB_MODEL => 'script:sub');

RlmRun::start_nginx($run, $port);

sub api {
    my ($method, $uri, $body, $headers, $opts) = @_;
    my %h = %{ $headers || {} };
    $h{'Content-Type'} //= 'application/json' if defined $body;
    return RlmRun::request('127.0.0.1', $port, $method, $uri, \%h, $body,
                           $opts);
}

sub script {
    my ($id, @steps) = @_;
    my $r = RlmRun::request('127.0.0.1', $mport, 'POST', '/mock/script',
                            { 'Content-Type' => 'application/json' },
                            encode_json({ id => $id, steps => \@steps }));
    die "mock script $id: $r->{status} $r->{body}" unless $r->{status} == 200;
}

# --- the sub model --------------------------------------------------------

script('root',
       { content => "```repl\na = llm_query('first question')\n"
                    . "b = rlm_query('second question')\n"
                    . "print(a, '|', b)\n```" },
       { content => 'FINAL(done)' });
script('sub', { content => 'FINAL(from the sub model)' });

my $c = api('POST', '/v1/chat/completions', encode_json({
    model => 'script:root',
    messages => [ { role => 'user', content => 'go' } ],
    context => 'a small context',
}));

is($c->{status}, 200, 'completion: 200') or diag($c->{body});
is(ref $c->{json} eq 'HASH' && $c->{json}{choices}[0]{message}{content},
   'done', 'completion: the root answers');

my $sid = $c->{headers}{'x-rlm-session-id'};
ok($sid, 'completion: X-RLM-Session-Id');

my $m = RlmRun::request('127.0.0.1', $mport, 'GET', '/mock/requests');
my @models = map { $_->{model} // '' } @{ $m->{json} || [] };
my $root = grep { $_ eq 'script:root' } @models;
my $sub = grep { $_ eq 'script:sub' } @models;

is($root, 2, 'the root loop made its two calls with RLM_MODEL')
    or diag("models the upstream saw: @models");
ok($sub >= 2, 'llm_query and the child loop used RLM_SUB_MODEL')
    or diag("models the upstream saw: @models");
is(scalar(grep { $_ ne 'script:root' && $_ ne 'script:sub' } @models), 0,
   'no other model reached the upstream')
    or diag("models the upstream saw: @models");

# --- GET /v1/models ---------------------------------------------------------

my $l = api('GET', '/v1/models');
is($l->{status}, 200, '/v1/models: 200');
my @ids = sort map { $_->{id} } @{ ($l->{json} || {})->{data} || [] };
is_deeply(\@ids, [ 'script:root', 'script:sub' ],
          '/v1/models lists RLM_MODEL and RLM_SUB_MODEL');
is(scalar(grep { ($_->{object} // '') ne 'model' }
          @{ ($l->{json} || {})->{data} || [] }), 0,
   '... each an object "model"');

# GET /v1/models/{id}: the model's object, or 404 model_not_found
my $one = api('GET', '/v1/models/script:sub');
is($one->{status}, 200, '/v1/models/script:sub: 200') or diag($one->{body});
is_deeply([ map { ($one->{json} || {})->{$_} } qw(id object) ],
          [ 'script:sub', 'model' ], '... the model\'s object');

$one = api('GET', '/v1/models/no-such-model');
is($one->{status}, 404, '/v1/models/no-such-model: 404');
is(RlmRun::envelope_problem($one), '', '... error envelope');
is(RlmRun::error_code($one), 'model_not_found', '... code model_not_found');
is(ref $one->{json} eq 'HASH' && $one->{json}{error}{param}, 'model',
   '... param "model"');

# --- fields the endpoint does not implement, through the Lua policy -------

for my $f ([ tools => [ { type => 'function',
                          function => { name => 'f' } } ] ],
           [ logprobs => JSON::PP::true ], [ n => 2 ]) {
    my $r = api('POST', '/v1/chat/completions', encode_json({
        model => 'script:root', $f->[0] => $f->[1],
        messages => [ { role => 'user', content => 'go' } ] }));
    is($r->{status}, 400, "$f->[0]: 400");
    is(ref $r->{json} eq 'HASH' && $r->{json}{error}{param}, $f->[0],
       "$f->[0]: param names it");
}

# --- X-Request-Id -------------------------------------------------------------

# every answer carries one, the access log the same; a client's sane id
# is kept, anything else replaced
like($c->{headers}{'x-request-id'} // '', qr/^[0-9a-f]{32}$/,
     'completion: a generated X-Request-Id');
like($one->{headers}{'x-request-id'} // '', qr/^[0-9a-f]{32}$/,
     'an error answer: X-Request-Id');

my $rid = api('GET', '/v1/models', undef,
              { 'X-Request-Id' => 'client-7f3a.b:c_d' });
is($rid->{headers}{'x-request-id'}, 'client-7f3a.b:c_d',
   'a client\'s X-Request-Id is echoed');

my $nope = api('GET', '/v1/nope', undef,
               { 'X-Request-Id' => 'two words' });
like($nope->{headers}{'x-request-id'} // '', qr/^[0-9a-f]{32}$/,
     'an id with a space is replaced');
is($nope->{status}, 404, 'an unknown URL under /v1: 404');
is(RlmRun::envelope_problem($nope), '', '... error envelope');

my $gen = $nope->{headers}{'x-request-id'} // 'none';
my $logged = '';
for (1 .. 50) {             # the access log is written after the answer
    $logged = do { local (@ARGV, $/) = ("$run/logs/access.log"); <> } // '';
    last if index($logged, "id=$gen") >= 0;
    select(undef, undef, undef, 0.1);
}
like($logged, qr{"GET /v1/models HTTP/1\.0" 200 .* id=client-7f3a\.b:c_d$}m,
     'the access log shows the client\'s id');
like($logged, qr{"GET /v1/nope HTTP/1\.0" 404 .* id=\Q$gen\E$}m,
     '... and the generated one the answer carried');

# --- trajectories -----------------------------------------------------------

SKIP: {
    skip 'no session id', 6 unless $sid;

    my $t = api('GET', "/v1/sessions/$sid/trajectories");
    is($t->{status}, 200, 'trajectories of the session: 200')
        or diag($t->{body});
    my $list = ref $t->{json} eq 'HASH' ? $t->{json}{data} : [];
    is(scalar @$list, 1, 'one trajectory, the completion\'s');
    is($list->[0] && $list->[0]{id}, $c->{json}{id},
       '... named by the completion id');

    my $f = api('GET', "/v1/sessions/$sid/trajectories/$c->{json}{id}");
    is($f->{status}, 200, 'the trajectory file: 200');
    my ($first) = split /\n/, $f->{body};
    my $meta = eval { decode_json($first) } || {};
    is($meta->{root_model}, 'script:root', '... root model in its metadata')
        or diag($first);
    is($meta->{sub_model}, 'script:sub', '... sub model in its metadata');
}

ok(-d "$run/trajectories/$sid", 'written under the run prefix')
    if $sid;

# the viewer (conf/viewer/, copied into the run prefix): the page and its
# script, under a policy that runs no other script
{
    my $p = api('GET', '/viewer/');
    is($p->{status}, 200, 'viewer page: 200');
    like($p->{headers}{'content-type'} // '', qr{^text/html},
         '... as HTML');
    like($p->{body}, qr{<script src="viewer\.js"></script>},
         '... loading its own script');
    like($p->{headers}{'content-security-policy'} // '',
         qr{default-src 'none'; script-src 'self';.*connect-src 'self'},
         '... under a content security policy');

    my $j = api('GET', '/viewer/viewer.js');
    is($j->{status}, 200, 'viewer script: 200');
    like($j->{headers}{'content-type'} // '', qr{^text/javascript},
         '... as JavaScript (the browser checks, nosniff)');
    is($j->{headers}{'x-content-type-options'}, 'nosniff', '... nosniff');
}

# --- the JSON envelope everywhere -------------------------------------------

my @cases = (
    [ 'GET', '/v2/anything', 404 ],
    [ 'POST', '/v2/anything', 404 ],
    [ 'GET', '/', 404 ],
    [ 'GET', '/v1/sessions/..%2f..%2fetc/eval', 404 ],
    [ 'POST', '/v1/sessions/..%2f..%2fetc/eval', 404 ],
    [ 'GET', '/v1/chat/completions', 405 ],
    [ 'DELETE', '/v1/models', 405 ],
    [ 'TRACE', '/v1/models', 405 ],
    [ 'POST', '/healthz', 405 ],
    [ 'GET', '/lua/run', 405 ],
);

for my $case (@cases) {
    my ($method, $uri, $status) = @$case;
    my $r = api($method, $uri, $method eq 'POST' ? '{}' : undef);
    is($r->{status}, $status, "$method $uri: $status");
    is(RlmRun::envelope_problem($r), '', "$method $uri: error envelope");
}

# nginx's own errors, before any location: a bad request, a long URI
my $r = RlmRun::request('127.0.0.1', $port, undef, undef, undef, undef,
                        { raw => "GET /v1/models HTTP/1.0\r\nHost: a\r\n"
                                 . "Host: b\r\n\r\n" });
is($r->{status}, 400, 'duplicate Host: 400');
is(RlmRun::envelope_problem($r), '', 'duplicate Host: error envelope');

$r = api('GET', '/v1/models?' . ('x' x 9000));
is($r->{status}, 414, 'a 9000-byte URI: 414');
is(RlmRun::envelope_problem($r), '', 'a 9000-byte URI: error envelope');

# the 5xx pages nginx itself would send are mapped too
my ($api) = grep { grep { $_->{name} eq 'location'
                          && $_->{args}[-1] eq '/v1/chat/completions' }
                   @{ $_->{directives} } } @{ RlmRun::servers($run) };
my %mapped;
for my $d (grep { $_->{name} eq 'error_page' } @{ $api->{directives} }) {
    $mapped{$_} = 1 for grep { /^\d+$/ } @{ $d->{args} };
}
is_deeply([ grep { !$mapped{$_} } qw(400 403 404 405 408 413 414 500 502
                                     503 504) ], [],
          'the API server maps nginx\'s error pages, 5xx included');

# --- a declared body over the cap -----------------------------------------

# only the headers go out; the answer must come without the body
my @big = (
    [ 'POST', '/v1/chat/completions', 400_000_000 ],
    [ 'POST', '/v1/chat/completions', 257 * 1024 * 1024 + 1 ],
    [ 'PUT', 'CONTEXT', 400_000_000 ],
    [ 'POST', '/lua/run', 2 * 1024 * 1024 ],
);

my $s = api('POST', '/v1/sessions', '{}');
my $ctx = ref $s->{json} eq 'HASH' && $s->{json}{id}
          ? "/v1/sessions/$s->{json}{id}/context" : '/v1/sessions/none';

for my $case (@big) {
    my ($method, $uri, $len) = @$case;
    $uri = $ctx if $uri eq 'CONTEXT';
    my $r = api($method, $uri, '{}', { 'Content-Length' => $len },
                { no_body => 1, timeout => 10 });
    my $what = "$method $uri, Content-Length $len, no body sent";

    ok(!$r->{error}, "$what: answered") or diag($r->{error});
    is($r->{status}, 413, "$what: 413");
    is(RlmRun::envelope_problem($r), '', "$what: error envelope");
    is(RlmRun::error_code($r), 'body_too_large',
       "$what: code body_too_large");
}

done_testing();
