# Supervision of rlm-sandboxd by the nginx master: started with nginx,
# restarted (with an alert) when killed, kept with every live session
# and its Python state across reloads, stopped with nginx.  Real nginx
# (master + 2 workers, daemon), real rlm-sandboxd, real CPython.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/module_lib";

use File::Temp qw( tempdir );
use IO::Socket::INET;
use Test::More;
use Time::HiRes qw( sleep );

use RlmModule;

plan skip_all => "module not built ($Module)" unless -f $Module;
plan skip_all => "rlm-sandboxd not built ($Sandboxd)" unless -x $Sandboxd;

my $dir = tempdir('rlm-super-XXXXXX', TMPDIR => 1, CLEANUP => 1);
# a free port: other suites run beside this one
my $port = do {
    my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                  Listen => 1) or die "no free port: $!";
    my $p = $s->sockport;
    close $s;
    $p;
};

# a wrapper records what the manager inherits, then becomes it
open my $w, '>', "$dir/sandboxd.sh" or die $!;
print $w <<"SH";
#!/bin/sh
env > $dir/env.txt
[ -e $dir/crash ] && exit 1
exec $Sandboxd "\$@"
SH
close $w;
chmod 0755, "$dir/sandboxd.sh";

# nginx's own environment holds something the manager must not see
$ENV{RLM_LEAK_CANARY} = 'sk-do-not-leak';

my $http = <<"HTTP";
    rlm_sandboxd $dir/sandboxd.sh;
    rlm_runtime_dir $dir/rt;
    rlm_pool_size 2;
    rlm_sessions_zone rlm_sessions 1m;
HTTP

my $server = <<'SERVER';
        location /v1/sessions { rlm_sessions_api; }
        location = /metrics { rlm_metrics; }
        location = /healthz { rlm_health; }
SERVER

my ($ok, $out) = start_nginx($dir, $port, $http, $server);
ok($ok, 'nginx starts') or diag($out);

END { stop_nginx() }

sub healthy {
    my ($st, $doc) = json_http(GET => '/healthz');
    return $st == 200 && ($doc->{manager} // '') eq 'reachable';
}

ok(wait_until(\&healthy, 20), 'the manager answers on its control socket');

my @mgr = manager_pids();
is(scalar @mgr, 1, 'one rlm-sandboxd, a child of the master');
my $manager = $mgr[0];

my $cmd = do { local (@ARGV, $/) = "/proc/$manager/cmdline"; <> } // '';
like($cmd, qr/--runtime-dir\0\Q$dir\E\/rt\0/, 'runtime dir passed');
like($cmd, qr/--pool\x002\0/, 'pool size passed');
like($cmd, qr/--socket-owner\0\d+:\d+\0/, 'socket owner passed');

my $env = do { local (@ARGV, $/) = "$dir/env.txt"; <> } // '';
unlike($env, qr/sk-do-not-leak|RLM_LEAK_CANARY/,
       "nginx's environment does not reach the manager");
my @names = sort map { /^([^=]+)=/ ? $1 : () } split /\n/, $env;
# (and the sanitizer settings nginx has, under make asan-test)
is_deeply([grep { $_ ne 'PWD' && $_ ne 'SHLVL' && $_ ne '_'
                  && !/^(?:ASAN|UBSAN|LSAN)_OPTIONS$/ } @names],
          ['LANG', 'PATH'], 'the manager gets only PATH and LANG');

my %fd = map {
    m{/(\d+)$} ? ($1 => (readlink($_) // '')) : ()
} glob "/proc/$manager/fd/*";
is($fd{0}, '/dev/null', 'stdin is /dev/null');
is($fd{1}, '/dev/null', 'stdout is /dev/null');
like($fd{2} // '', qr/error\.log$/, 'stderr is the error log');
ok(!grep({ /access\.log|nginx\.conf/ } values %fd),
   'no other file of nginx reaches the manager');

# the inode of nginx's listening socket, from /proc/net/tcp
my $hexport = sprintf '%04X', $port;
my ($inode) = do {
    local (@ARGV) = '/proc/net/tcp';
    map { (split)[9] } grep { /^\s*\d+: 0100007F:$hexport 00000000:0000 0A/ }
        <>;
};
ok($inode, 'found the listening socket');
ok(!grep({ $_ eq "socket:[$inode]" } values %fd),
   "nginx's listening socket does not leak into the manager");

# a session with state

my ($st, $doc) = json_http(POST => '/v1/sessions');
is($st, 201, 'session created');
my $sid = $doc->{id};

($st, $doc) = json_http(POST => "/v1/sessions/$sid/eval",
                        '{"code":"secret = 6 * 7"}');
is($doc->{status}, 'ok', 'state set in the session');

# reload: same manager, same session, same Python state

ok(signal_nginx('HUP'), 'reload signalled');
ok(wait_until(sub { error_log() =~ /reconfiguring/ }, 10), 'reloading');
sleep 1;

is_deeply([manager_pids()], [$manager], 'the manager survives the reload');

($st, $doc) = json_http(POST => "/v1/sessions/$sid/eval",
                        '{"code":"print(secret)"}');
is($st, 200, 'eval after the reload');
is($doc->{status}, 'ok', 'status ok after the reload');
is($doc->{stdout}, "42\n", 'the session kept its Python state');
is($doc->{cell}, 2, 'the session kept its cell count');

# a reload that changes a limit keeps the manager too

my $conf = do { local (@ARGV, $/) = "$dir/conf/nginx.conf"; <> };
$conf =~ s/rlm_pool_size 2;/rlm_pool_size 2;\n    rlm_cell_timeout 7s;/;
open my $fh, '>', "$dir/conf/nginx.conf" or die $!;
print $fh $conf;
close $fh;

signal_nginx('HUP');
sleep 1.5;
is_deeply([manager_pids()], [$manager],
          'a reload with new limits keeps the manager');

($st, $doc) = json_http(POST => "/v1/sessions/$sid/eval",
                        '{"code":"print(secret + 1)"}');
is($doc->{stdout}, "43\n", 'and the session');

# kill the manager: the master restarts it, with an alert

kill 'KILL', $manager;

ok(wait_until(sub { my $p = sandboxd_pid(); $p && $p != $manager }, 20),
   'a new manager is started');
my $manager2 = sandboxd_pid();
isnt($manager2, $manager, 'with a new pid');

like(error_log(), qr/\[alert\].*rlm-sandboxd \d+ exited on signal 9/,
     'the death is logged at alert');
like(error_log(),
     qr/\[alert\].*rlm: rlm-sandboxd exited after serving, restarting it in 0 ms/,
     'the restart is logged at alert');

ok(wait_until(\&healthy, 20), 'the new manager answers');

($st, $doc) = json_http(POST => "/v1/sessions/$sid/eval",
                        '{"code":"print(secret)"}');
is($st, 200, 'the old session answers');
is($doc->{status}, 'sandbox_lost', 'with sandbox_lost');
like($doc->{error}{evalue} // '', qr/manager restarted/, 'saying why');

($st, $doc) = json_http(GET => "/v1/sessions/$sid");
is($doc->{status}, 'sandbox_lost', 'the session shows it');

($st, $doc) = json_http(POST => '/v1/sessions');
is($st, 201, 'a new session works');
my $sid2 = $doc->{id};

($st, $doc) = json_http(POST => "/v1/sessions/$sid2/eval",
                        '{"code":"print(1 + 1)"}');
is($doc->{stdout}, "2\n", 'and runs cells');

my (undef, undef, $metrics) = http(GET => '/metrics');
like($metrics, qr/^rlm_manager_restarts_total 1$/m,
     'metrics count the restart');

# a manager that served and is then killed, again and again at intervals
# shorter than 30 s, is restarted at once each time: no crash-loop backoff

my $prev = $manager2;
for my $n (2 .. 4) {
    ($st, $doc) = json_http(POST => '/v1/sessions');
    is($st, 201, "manager $n serves before it is killed");

    kill 'KILL', $prev;
    ok(wait_until(sub { my $p = sandboxd_pid(); $p && $p != $prev }, 10),
       "killed after serving ($n): restarted");
    like(error_log(),
         qr/exited after serving, restarting it in 0 ms \(restart $n\)/,
         "killed after serving ($n): no backoff");
    ok(wait_until(sub { (json_http(POST => '/v1/sessions'))[0] == 201 },
                  10),
       "killed after serving ($n): new sessions work again");
    $prev = sandboxd_pid();
}

# a real crash loop, a manager that exits at once, still backs off:
# 0.1 s, 0.2 s, 0.4 s ...

open my $crash, '>', "$dir/crash" or die $!;
close $crash;
kill 'KILL', $prev;

ok(wait_until(sub { error_log() =~ /before serving, restarting it in 400 ms/ },
              20),
   'a manager that exits at once is restarted later each time');
my @delays = error_log() =~ /before serving, restarting it in (\d+) ms/g;
is("@delays[0 .. 2]", '100 200 400', 'the delay doubles');

unlink "$dir/crash";
ok(wait_until(\&healthy, 20), 'the manager is back once it starts');
my $restarts = () = error_log() =~ /restarting it in/g;
ok($restarts >= 7, "the restarts are counted ($restarts)");

# a reload that moves the runtime dir restarts the manager on purpose:
# a notice, no alert, no backoff

my $before = sandboxd_pid();
my $alerts = () = error_log() =~ /\[alert\]/g;

$conf = do { local (@ARGV, $/) = "$dir/conf/nginx.conf"; <> };
$conf =~ s{rlm_runtime_dir \Q$dir\E/rt;}{rlm_runtime_dir $dir/rt2;};
open $fh, '>', "$dir/conf/nginx.conf" or die $!;
print $fh $conf;
close $fh;

signal_nginx('HUP');

ok(wait_until(sub { my $p = sandboxd_pid(); $p && $p != $before }, 20),
   'moving the runtime dir restarts the manager');
ok(wait_until(\&healthy, 20), 'which serves in the new dir');
ok(-S "$dir/rt2/control.sock", 'its control socket is there');
like(error_log(), qr/\[notice\].*rlm_sandboxd or rlm_runtime_dir changed/,
     'the restart is a notice');
my $alerts_after = () = error_log() =~ /\[alert\]/g;
is($alerts_after, $alerts, 'and raises no alert');

# stop: the manager goes with nginx

my $last = sandboxd_pid();
stop_nginx();
ok(wait_until(sub { !kill 0, $last }, 10), 'the manager stops with nginx');

done_testing();
