# nginx -s reload while sessions, spares and completions are live: the
# old workers finish what they hold and exit cleanly, leaving no socket
# open (nginx logs "[alert] open socket #N left in connection M" and
# "[alert] aborting" for any connection a module forgot at exit).  Real
# nginx (master + 2 workers), real rlm-sandboxd, the scripted model of
# t/lib/mock_llm.lua served by the same nginx.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/module_lib";

use File::Temp qw( tempdir );
use IO::Socket::INET;
use JSON::PP;
use POSIX ();
use Test::More;
use Time::HiRes qw( sleep time );

use RlmModule;

plan skip_all => "module not built ($Module)" unless -f $Module;
plan skip_all => "rlm-sandboxd not built ($Sandboxd)" unless -x $Sandboxd;

my $Lua = '/usr/lib/nginx/modules/ngx_http_lua_module.so';
my $Ndk = '/usr/lib/nginx/modules/ndk_http_module.so';
plan skip_all => "lua module not installed" unless -f $Lua && -f $Ndk;

my $dir = tempdir('rlm-reload-XXXXXX', TMPDIR => 1, CLEANUP => 1);

my $port = do {
    my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                  Listen => 1) or die "no free port: $!";
    my $p = $s->sockport;
    close $s;
    $p;
};

my $http = <<"HTTP";
    lua_package_path "$Root/lua/?.lua;$Root/t/lib/?.lua;;";
    lua_shared_dict mock_llm 8m;
    rlm_sandboxd $Sandboxd;
    rlm_runtime_dir $dir/rt;
    rlm_pool_size 2;
    rlm_session_spares 2;
    rlm_sessions_zone rlm_sessions 4m;
    rlm_provider mock url=http://127.0.0.1:$port/mock/v1 model=script:root
                 retries=0 timeout=10s;
HTTP

my $server = <<'SERVER';
        location /v1/sessions { rlm_sessions_api; }
        location = /v1/chat/completions { rlm_completions; }
        location = /mock/v1/chat/completions {
            content_by_lua_block { require("mock_llm").serve() }
        }
        location = /mock/script {
            content_by_lua_block { require("mock_llm").script() }
        }
SERVER

my ($ok, $out) = start_nginx($dir, $port, $http, $server,
                             main => "load_module $Ndk;\n"
                                     . "load_module $Lua;\n"
                                     . "worker_processes 2;");
ok($ok, 'nginx starts') or diag($out);

END { stop_nginx() }

ok(wait_until(sub { (json_http(POST => '/v1/sessions'))[0] == 201 }, 20),
   'sessions can be created');

# every model call is slow and every block makes a sub-call and sleeps:
# provider calls, sandbox channels and control requests are in flight
# whenever a reload comes

my $block = "```repl\nimport time\nr = llm_query('hi')\ntime.sleep(0.3)\n"
            . "answer['content'] = 'done'\nanswer['ready'] = True\n```";
my $script = JSON::PP->new->encode({
    id => 'root', steps => [ { content => $block, latency => 0.2 } ] });
my ($st) = http(POST => '/mock/script', $script);
is($st, 200, 'the model is scripted');

my $stop = "$dir/stop";
my @kids;

for my $k (1 .. 3) {
    my $pid = fork // die "fork: $!";

    if ($pid == 0) {
        my (%count, $sid);

        while (!-e $stop) {
            my ($s, $doc) = json_http(POST => '/v1/sessions');
            $count{"create $s"}++;
            $sid = $doc->{id} or next;

            ($s) = json_http(POST => "/v1/sessions/$sid/eval",
                             '{"code":"n = 1"}');
            $count{"eval $s"}++;

            ($s) = json_http(POST => '/v1/chat/completions',
                             '{"model":"script:root","messages":'
                             . '[{"role":"user","content":"go"}]}',
                             'X-RLM-Session-Id' => $sid);
            $count{"completion $s"}++;

            ($s) = http(DELETE => "/v1/sessions/$sid");
            $count{"delete $s"}++;
        }

        open my $fh, '>', "$dir/load.$k" or POSIX::_exit(1);
        print $fh map { "$_ $count{$_}\n" } sort keys %count;
        close $fh;
        POSIX::_exit(0);
    }

    push @kids, $pid;
}

# reloads under that load

sleep 1;

for my $n (1 .. 5) {
    ok(signal_nginx('HUP'), "reload $n");
    sleep 1.5;
}

open my $fh, '>', $stop or die $!;
close $fh;
waitpid $_, 0 for @kids;

# every old worker has gone: only the current two are left

ok(wait_until(sub { my @w = worker_pids(); @w == 2 }, 30),
   'the old workers exit');
sleep 1;

my $log = error_log();
my @left = $log =~ /(open socket #\d+ left in connection \d+)/g;
is(scalar @left, 0, 'no socket is left open at a worker exit')
    or diag(join "\n", @left[0 .. ($#left > 4 ? 4 : $#left)]);
unlike($log, qr/\[alert\].*aborting/, 'no worker aborts');
my @alerts = $log =~ /^(.*\[alert\].*)$/mg;
is(scalar @alerts, 0, 'no alert at all') or diag(join "\n", @alerts);

my $exits = () = $log =~ /worker process \d+ exited with code 0/g;
cmp_ok($exits, '>=', 10, "old workers exited with code 0 ($exits)");

# what the load saw

my %all;
for my $k (1 .. 3) {
    open my $in, '<', "$dir/load.$k" or next;
    while (<$in>) {
        $all{$1} += $2 if /^(.+) (\d+)$/;
    }
}
my @bad = grep { !/ (200|201|204)$/ } keys %all;
ok($all{'completion 200'}, "completions ran ($all{'completion 200'})");
is(scalar @bad, 0, 'every request succeeded across the reloads')
    or diag(join ', ', map { "$_: $all{$_}" } @bad);

done_testing();
