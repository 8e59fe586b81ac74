# Two other ways to run the manager: an external rlm-sandboxd reached
# through rlm_sandboxd_socket (nginx neither starts nor stops it), and
# master_process off (started by the single process, stopped with it).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/module_lib";

use File::Temp qw( tempdir );
use Test::More;
use Time::HiRes qw( sleep );

use RlmModule;

plan skip_all => "module not built ($Module)" unless -f $Module;
plan skip_all => "rlm-sandboxd not built ($Sandboxd)" unless -x $Sandboxd;

my $dir = tempdir('rlm-ext-XXXXXX', TMPDIR => 1, CLEANUP => 1);
my $port = 19916;

my $server = <<'SERVER';
        location /v1/sessions { rlm_sessions_api; }
        location = /healthz { rlm_health; }
SERVER

sub session_roundtrip {
    my ($what) = @_;

    ok(wait_until(sub { (json_http(GET => '/healthz'))[0] == 200 }, 20),
       "$what: manager reachable");

    my ($st, $doc) = json_http(POST => '/v1/sessions');
    is($st, 201, "$what: session created");
    my $id = $doc->{id};

    ($st, $doc) = json_http(POST => "/v1/sessions/$id/eval",
                            '{"code":"print(sum(range(10)))"}');
    is($doc->{stdout}, "45\n", "$what: cell runs");

    ($st, $doc) = json_http(DELETE => "/v1/sessions/$id");
    ok($doc->{deleted}, "$what: session deleted");
}

# --- an external manager

my $ext = "$dir/ext";
mkdir $ext;
my $owner = $> == 0 ? '0:0' : "$>:" . (split ' ', $))[0];

my $mpid = fork // die "fork: $!";
if ($mpid == 0) {
    open STDOUT, '>', "$dir/ext.log";
    open STDERR, '>&', \*STDOUT;
    exec $Sandboxd, '--runtime-dir', $ext, '--pool', '1',
         '--socket-owner', $owner;
    exit 127;
}

END { kill 'TERM', $mpid if $mpid; }

ok(wait_until(sub { -S "$ext/control.sock" }, 20),
   'the external manager is serving');

my ($ok, $out) = start_nginx($dir, $port,
                             "    rlm_sandboxd_socket $ext/control.sock;\n",
                             $server);
ok($ok, 'nginx starts with rlm_sandboxd_socket') or diag($out);

is_deeply([manager_pids()], [], 'nginx starts no manager of its own');

session_roundtrip('external');

stop_nginx();

ok(kill(0, $mpid), 'the external manager outlives nginx');
kill 'TERM', $mpid;
waitpid $mpid, 0;
$mpid = 0;

# --- master_process off

($ok, $out) = start_nginx($dir, $port, <<"HTTP", $server,
    rlm_sandboxd $Sandboxd;
    rlm_runtime_dir $dir/rt;
    rlm_pool_size 1;
HTTP
                          main => "master_process off;");
ok($ok, 'nginx starts with master_process off') or diag($out);

# the single process starts it as it comes up: on a loaded machine that
# can be a moment after nginx answers
wait_until(sub { manager_pids() == 1 }, 20);
my @m = manager_pids();
is(scalar @m, 1, 'the single process started the manager');

session_roundtrip('single process');

like(error_log(), qr/master_process is off: rlm-sandboxd is started but not restarted/,
     'the log says it is not supervised');

stop_nginx();
ok(wait_until(sub { !kill 0, $m[0] }, 10), 'the manager stops with nginx');

done_testing();
