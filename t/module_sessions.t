# Sessions in shared memory, driven by hand: idle expiry releases the
# sandbox, a client that disconnects mid-cell leaks nothing and leaves
# the session usable, cells of one session are ordered across workers
# while other sessions run in parallel, owners are isolated, access-log
# variables, chunked bodies over the cap.  Real nginx (master + 2
# workers), real rlm-sandboxd, real CPython.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/module_lib";

use File::Temp qw( tempdir );
use IO::Socket::INET;
use JSON::PP;
use Test::More;
use Time::HiRes qw( sleep time );

use RlmModule;

plan skip_all => "module not built ($Module)" unless -f $Module;
plan skip_all => "rlm-sandboxd not built ($Sandboxd)" unless -x $Sandboxd;

my $dir = tempdir('rlm-sess-XXXXXX', TMPDIR => 1, CLEANUP => 1);
my $port = 19911;

my $http = <<"HTTP";
    rlm_sandboxd $Sandboxd;
    rlm_runtime_dir $dir/rt;
    rlm_pool_size 2;
    rlm_session_idle_timeout 4s;
    rlm_session_queue 3;
    rlm_context_max_size 64k;
    log_format rlm '\$request_method \$uri \$status sid=\$rlm_session_id '
                   'cell=\$rlm_cell_status ms=\$rlm_sandbox_ms';
HTTP

my $server = <<"SERVER";
        access_log $dir/logs/rlm.log rlm;
        location /v1/sessions { rlm_sessions_api; }
        location /tenant/ {
            rlm_session_owner \$http_x_tenant;
            rlm_sessions_api;
        }
        location = /metrics { rlm_metrics; }
        location = /healthz { rlm_health; }
SERVER

my ($ok, $out) = start_nginx($dir, $port, $http, $server);
ok($ok, 'nginx starts') or diag($out);

END { stop_nginx() }

ok(wait_until(sub {
    my ($st, $doc) = json_http(GET => '/healthz');
    $st == 200;
}, 20), 'manager reachable');

sub create {
    my ($path, %h) = @_;
    my ($st, $doc) = json_http(POST => $path // '/v1/sessions', '', %h);
    return $st == 201 ? $doc->{id} : undef;
}

sub evalc {
    my ($id, $code, $prefix, %h) = @_;
    $prefix //= '/v1/sessions';
    my ($st, $doc) = json_http(POST => "$prefix/$id/eval",
                               encode_json({ code => $code }), %h);
    return wantarray ? ($st, $doc) : $doc;
}

sub metric {
    my ($name) = @_;
    my (undef, undef, $text) = http(GET => '/metrics');
    return $text =~ /^\Q$name\E (\d+)/m ? $1 : undef;
}

# --- a client that goes away mid-cell

my $sid = create();
ok($sid, 'session created');

my $sock = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port") or die;
my $body = encode_json({ code => "import time\ntime.sleep(1)\nleft = 1" });
print $sock "POST /v1/sessions/$sid/eval HTTP/1.1\r\nHost: x\r\n"
            . "Content-Type: application/json\r\n"
            . "Content-Length: " . length($body) . "\r\n\r\n$body";
sleep 0.3;
close $sock;

my ($st, $doc) = evalc($sid, 'print(left)');
is($st, 200, 'the next cell of the session runs');
is($doc->{stdout}, "1\n", 'after the abandoned cell finished in order');
is($doc->{cell}, 2, 'both cells counted');

($st, $doc) = json_http(GET => "/v1/sessions/$sid");
ok(!$doc->{busy} && $doc->{queued} == 0, 'nothing is left busy or queued');

# --- ordering within a session, across workers; 429 beyond the queue

my @socks;
for my $i (1 .. 6) {
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port") or die;
    my $b = encode_json({ code => "import time\nseen = globals().get('seen', [])"
                                 . "\nseen.append($i)\ntime.sleep(0.3)" });
    print $s "POST /v1/sessions/$sid/eval HTTP/1.0\r\n"
             . "Content-Type: application/json\r\n"
             . "Content-Length: " . length($b) . "\r\n\r\n$b";
    push @socks, $s;
    sleep 0.05;
}

my @status = map {
    local $/;
    my $r = <$_> // '';
    close $_;
    $r =~ m{^HTTP/\S+ (\d+)} ? $1 : 0;
} @socks;

is_deeply([sort @status], [200, 200, 200, 200, 429, 429],
          'one running + rlm_session_queue 3 waiting; the rest get 429');

($st, $doc) = evalc($sid, 'print(seen)');
is($doc->{stdout}, "[1, 2, 3, 4]\n", 'the accepted cells ran in order');

# --- another session is not held up by a busy one

my $other = create();
my $t0 = time;
my $slow = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port") or die;
$body = encode_json({ code => "import time\ntime.sleep(2)" });
print $slow "POST /v1/sessions/$sid/eval HTTP/1.0\r\n"
            . "Content-Type: application/json\r\n"
            . "Content-Length: " . length($body) . "\r\n\r\n$body";
sleep 0.2;
($st, $doc) = evalc($other, 'print("fast")');
is($doc->{stdout}, "fast\n", 'a cell of another session runs meanwhile');
my $resp = do { local $/; <$slow> } // '';
like($resp, qr/"status":"ok"/, 'the slow cell completes');
close $slow;

# --- owners

my $mine = create('/tenant/sessions', 'X-Tenant' => 'alice');
ok($mine, 'alice creates a session');
($st, $doc) = json_http(GET => "/tenant/sessions/$mine", '',
                        'X-Tenant' => 'alice');
is($doc->{owner}, 'alice', 'owned by alice');
($st, $doc) = json_http(GET => "/tenant/sessions/$mine", '',
                        'X-Tenant' => 'mallory');
is($st, 404, 'another tenant gets 404');
($st) = evalc($mine, 'print(1)', '/tenant/sessions', 'X-Tenant' => 'mallory');
is($st, 404, 'and cannot run cells in it');
($st) = json_http(DELETE => "/tenant/sessions/$mine", '',
                  'X-Tenant' => 'mallory');
is($st, 404, 'nor delete it');
($st, $doc) = json_http(GET => '/tenant/sessions', '', 'X-Tenant' => 'mallory');
is(scalar @{ $doc->{data} // [] }, 0, 'nor list it');
($st, $doc) = json_http(GET => '/tenant/sessions', '', 'X-Tenant' => 'alice');
is(scalar @{ $doc->{data} // [] }, 1, 'alice lists hers only');

# --- chunked context over the cap

my $big = 'a' x 70000;
my $c = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port") or die;
print $c "PUT /v1/sessions/$other/context HTTP/1.1\r\nHost: x\r\n"
         . "Content-Type: text/plain\r\nTransfer-Encoding: chunked\r\n"
         . "Connection: close\r\n\r\n"
         . sprintf("%x\r\n%s\r\n0\r\n\r\n", length $big, $big);
$resp = do { local $/; <$c> } // '';
close $c;
like($resp, qr{^HTTP/1.1 413}, 'a chunked context over the cap gets 413');
like($resp, qr{^Content-Type: application/json\r$}mi, 'as JSON');
my ($body413) = $resp =~ /\r\n\r\n(.*)\z/s;
my $env = eval { decode_json($body413 // '') } // {};
is($env->{error}{code}, 'body_too_large', 'in the envelope, not an HTML page');
is($env->{error}{type}, 'invalid_request_error', 'with its type');
like($env->{error}{message}, qr/larger than \d+ bytes/, 'and the cap');

($st, $doc) = json_http(PUT => "/v1/sessions/$other/context", 'b' x 70000,
                        'Content-Type' => 'text/plain');
is($st, 413, 'a sized one too');
is($doc->{error}{code}, 'body_too_large', 'in the envelope');

($st, $doc) = json_http(PUT => "/v1/sessions/$other/context", 'c' x 60000,
                        'Content-Type' => 'text/plain');
is($st, 200, 'a context under the cap loads');
is($doc->{bytes}, 60000, 'all of it');

# --- access-log variables

my $log = do { local (@ARGV, $/) = "$dir/logs/rlm.log"; <> } // '';
like($log, qr{^POST /v1/sessions/$other/eval 200 sid=$other cell=ok ms=\d+\.\d{3}$}m,
     '$rlm_session_id, $rlm_cell_status and $rlm_sandbox_ms are logged');
like($log, qr{^POST /v1/sessions 201 sid=[0-9a-f]{32} cell= ms=$}m,
     'a create logs its new id');

# --- idle expiry releases the session

my $idle = create();
ok($idle, 'a session to expire');
my $expired0 = metric('rlm_sessions_expired_total');

ok(wait_until(sub {
    my ($s) = json_http(GET => "/v1/sessions/$idle");
    $s == 404;
}, 15), 'an idle session expires');

ok(metric('rlm_sessions_expired_total') > $expired0, 'expiry is counted');
like(error_log(), qr/\[info\].*session idle for more than 4 s expired/,
     'and logged at info');

stop_nginx();

done_testing();
