# With API keys on (RLM_KEYS_FILE), every location `make run` serves
# wants a key, or says why not.
#
# The configuration is the one `make run` writes (make run-prefix into a
# temporary directory, keys on, so nginx listens on every address).  The
# locations are found by parsing the files nginx reads, includes and all,
# not listed here, so that a new endpoint cannot ship open by accident:
#
#   * a location with no "open:" / "loopback only:" comment right above
#     it must answer 401 in the OpenAI error envelope to GET, POST, PUT
#     and DELETE, with no key and with a wrong key, from loopback and
#     from a non-loopback address of this host (when it has one);
#   * an internal location must answer 404 (in the envelope): a client
#     cannot reach it;
#   * "loopback only:" must be true: the server listens on loopback only,
#     or the location allows only loopback; from a non-loopback address
#     it answers 403 in the envelope (or nothing listens there);
#   * "open:" locations must answer without a key (health, the 404 of
#     unknown URIs).
#
# Then POST /lua/run, which used to run code for anyone: its session
# belongs to the key's tenant and counts against its max_sessions.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/run_lib";

use File::Temp qw(tempdir);
use POSIX ();
use Test::More;
use Time::HiRes qw(sleep);

use RlmRun;

my $why = RlmRun::missing();
plan skip_all => $why if $why;

my $dir = tempdir('rlm-keys-XXXXXX', TMPDIR => 1, CLEANUP => 1);
my $keys = "$dir/keys";
my $key_a = 'sk-walk-team-a-0001';
my $key_b = 'sk-walk-team-b-0002';
open my $fh, '>', $keys or die "$keys: $!";
print $fh "$key_a team-a max_sessions=1\n$key_b team-b\n";
close $fh;

# the workers (user nobody) read it
chmod 0755, $dir;
chmod 0644, $keys;

my $port = RlmRun::free_port_pair();
my $run = RlmRun::make_prefix(PORT => $port, RLM_KEYS_FILE => $keys);

like(RlmRun::slurp("$run/conf/listen.conf"), qr/^listen $port;$/m,
     'with RLM_KEYS_FILE, make run listens on every address');

RlmRun::start_nginx($run, $port);

my @external = RlmRun::external_addresses();
my $ext = $external[0];

my $servers = RlmRun::servers($run);

my %auth = (
    'no key' => {},
    'a wrong key' => { Authorization => 'Bearer sk-not-a-key-of-ours-9' },
);

sub listen_port {
    my ($listen) = @_;
    return $listen =~ /(\d+)$/ ? $1 : 80;
}

sub loopback {
    my ($listen) = @_;
    return $listen =~ /^(127\.[\d.]+|\[::1\]|localhost):\d+$/;
}

my (%seen, $walked);

for my $srv (@$servers) {
    my @listen = @{ $srv->{listen} };
    ok(scalar @listen, 'every server has a listen line') or next;

    my $sport = listen_port($listen[0]);
    my $all_loopback = !grep { !loopback($_) } @listen;

    # where clients can reach this server from
    my @from = ('127.0.0.1');
    push @from, $ext if $ext && !$all_loopback;

    for my $loc (@{ $srv->{locations} }) {
        my $name = RlmRun::name_of($loc);
        next if $loc->{pattern} =~ /^@/;     # only error_page gets there

        my $uri = RlmRun::uri_for($srv->{locations}, $loc);
        ok(defined $uri, "a URI reaches location $name") or next;

        $seen{$loc->{pattern}} = 1;
        $walked++;

        if (RlmRun::has($loc, 'internal')) {
            for my $m (qw(GET POST)) {
                my $r = RlmRun::request('127.0.0.1', $sport, $m, $uri,
                                        { 'Content-Type' => 'application/json' },
                                        $m eq 'POST' ? '{}' : undef);
                is($r->{status}, 404, "$m $uri (internal): 404");
                is(RlmRun::envelope_problem($r), '',
                   "$m $uri (internal): error envelope");
            }
            next;
        }

        if (($loc->{kind} // '') eq 'open') {
            for my $addr (@from) {
                my $r = RlmRun::request($addr, $sport, 'GET', $uri);
                ok($r->{status} && $r->{status} != 401
                   && $r->{status} < 500,
                   "GET $uri from $addr (open): answered without a key")
                    or diag("status $r->{status}: $r->{body}");
            }
            next;
        }

        if (($loc->{kind} // '') eq 'loopback') {
            my @allow = map { $_->{args}[0] }
                        grep { $_->{name} eq 'allow' } @{ $loc->{block} };
            my $denies = grep { $_->{name} eq 'deny'
                                && $_->{args}[0] eq 'all' }
                         @{ $loc->{block} };
            my $allow_lo = @allow && $denies
                           && !grep { !/^(127\.|::1$)/ } @allow;

            ok($all_loopback || $allow_lo,
               "$name (loopback only): listens on loopback only, or"
               . " allows only loopback");

            my $r = RlmRun::request('127.0.0.1', $sport, 'GET', $uri);
            ok($r->{status} && $r->{status} != 401 && $r->{status} != 403
               && $r->{status} < 500,
               "GET $uri from loopback (loopback only): answered")
                or diag("status $r->{status}: $r->{body}");

            SKIP: {
                skip 'no non-loopback address on this host', 2 unless $ext;

                $r = RlmRun::request($ext, $sport, 'GET', $uri);
                if ($all_loopback) {
                    ok(!$r->{status}, "$uri: nothing listens on $ext");
                    pass("$uri: not reachable from $ext");
                } else {
                    is($r->{status}, 403, "GET $uri from $ext: 403");
                    is(RlmRun::envelope_problem($r), '',
                       "GET $uri from $ext: error envelope");
                }
            }
            next;
        }

        # everything else: the policy's access phase, so 401
        for my $addr (@from) {
            for my $how (sort keys %auth) {
                for my $m (qw(GET POST PUT DELETE)) {
                    my %h = (%{ $auth{$how} },
                             'Content-Type' => 'application/json');
                    my $body = $m =~ /^P/ ? '{}' : undef;
                    my $r = RlmRun::request($addr, $sport, $m, $uri, \%h,
                                            $body);
                    my $what = "$m $uri from $addr with $how";

                    is($r->{status}, 401, "$what: 401")
                        or diag(substr($r->{body}, 0, 300));
                    is(RlmRun::envelope_problem($r), '',
                       "$what: error envelope");
                    is(RlmRun::error_code($r), 'invalid_api_key',
                       "$what: code invalid_api_key");
                    is($r->{headers}{'www-authenticate'}, 'Bearer',
                       "$what: WWW-Authenticate: Bearer");
                }
            }
        }
    }
}

# the parser found the configuration, not an empty file
ok($walked >= 6, "walked $walked locations");
ok($seen{'/lua/run'} && $seen{'/v1/chat/completions'},
   'the walk includes /lua/run (an included file) and the completions');

diag("no non-loopback address: requests from another address not tried")
    unless $ext;

# --- POST /lua/run, with keys -------------------------------------------

my %ja = (Authorization => "Bearer $key_a");
my %jb = (Authorization => "Bearer $key_b");

my $r = RlmRun::request('127.0.0.1', $port, 'POST', '/lua/run', \%ja,
                        'print(6 * 7)');
is($r->{status}, 200, '/lua/run with a key: 200');
is($r->{json} && $r->{json}{output}, "42\n", '/lua/run with a key: runs');

# the session of a running /lua/run is listed for its tenant, with the
# tenant as owner, and not for another tenant
my $child = fork() // die "fork: $!";
if ($child == 0) {
    my $c = RlmRun::request('127.0.0.1', $port, 'POST', '/lua/run', \%ja,
                            "import time\ntime.sleep(4)\nprint('slept')");
    POSIX::_exit($c->{status} == 200
                 && ($c->{json}{output} // '') eq "slept\n" ? 0 : 1);
}

my ($mine, $done);
for (1 .. 300) {
    my $l = RlmRun::request('127.0.0.1', $port, 'GET', '/v1/sessions', \%ja);
    my $data = ref $l->{json} eq 'HASH' ? $l->{json}{data} : [];
    if (@$data) {
        $mine = $data->[0];
        last;
    }
    if (waitpid($child, POSIX::WNOHANG()) == $child) {
        $done = $?;
        last;
    }
    sleep 0.05;
}

ok($mine, "a running /lua/run's session is listed for its tenant");
is($mine && $mine->{owner}, 'team-a', '... with the tenant as owner');

my $lb = RlmRun::request('127.0.0.1', $port, 'GET', '/v1/sessions', \%jb);
is(ref $lb->{json} eq 'HASH' && scalar @{ $lb->{json}{data} }, 0,
   'another tenant does not see it');

if (!defined $done) {
    waitpid($child, 0);
    $done = $?;
}
is($done, 0, 'that /lua/run finished: 200, "slept"');

# team-a may have one session: with it taken, /lua/run is refused
my $s = RlmRun::request('127.0.0.1', $port, 'POST', '/v1/sessions',
                        { %ja, 'Content-Type' => 'application/json' }, '{}');
ok($s->{status} == 200 || $s->{status} == 201, 'team-a creates a session')
    or diag($s->{body});
my $sid = ref $s->{json} eq 'HASH' && $s->{json}{id};

$r = RlmRun::request('127.0.0.1', $port, 'POST', '/lua/run', \%ja,
                     'print(1)');
is($r->{status}, 429, "/lua/run counts against the tenant's max_sessions");
is(RlmRun::error_code($r),
   'session_limit_exceeded', '... code session_limit_exceeded');

$r = RlmRun::request('127.0.0.1', $port, 'POST', '/lua/run', \%jb,
                     'print(1)');
is($r->{status}, 200, 'another tenant is not affected');

RlmRun::request('127.0.0.1', $port, 'DELETE', "/v1/sessions/$sid", \%ja)
    if $sid;
$r = RlmRun::request('127.0.0.1', $port, 'POST', '/lua/run', \%ja,
                     'print(1)');
is($r->{status}, 200, 'with the session deleted, /lua/run runs again');

# --- /metrics -------------------------------------------------------------

$r = RlmRun::request('127.0.0.1', $port, 'GET', '/metrics');
is($r->{status}, 200, '/metrics from loopback: 200');
like($r->{body}, qr/^# (HELP|TYPE) rlm_/m, '... Prometheus text');

SKIP: {
    skip 'no non-loopback address on this host', 3 unless $ext;

    $r = RlmRun::request($ext, $port, 'GET', '/metrics');
    is($r->{status}, 403, "/metrics from $ext: 403");
    is(RlmRun::envelope_problem($r), '', '... in the error envelope');
    unlike($r->{body}, qr/rlm_sessions/, '... and no metric in it');
}

done_testing();
