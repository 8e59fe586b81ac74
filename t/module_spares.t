# Spare sessions (rlm_session_spares): sandboxes acquired from the
# manager ahead of time so POST /sessions need not wait for it.  2 by
# default, 0 turns them off; with N > 0 the gauge fills to N without
# showing sessions; creates take a spare and it is refilled; spares and
# sessions together stay within rlm_max_sessions; a client id works and a
# duplicate one takes no spare; spares made before a reload that changed
# the sandbox limits, or before the manager was restarted, are never
# handed out.
# While the manager is stopped, sessions are still created from spares;
# workers killed while their refills wait do not block the spares for
# good, and the sandboxes the manager handed to them are released by the
# orphan sweep; a session whose worker died while creating it goes at
# expiry; after a binary upgrade no spare of the old manager is handed
# out.  Directive bounds are checked by nginx -t.  Real nginx (master + 2
# workers), real rlm-sandboxd, real CPython.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/module_lib";

use File::Path qw( make_path );
use File::Temp qw( tempdir );
use IO::Socket::INET;
use JSON::PP;
use Test::More;
use Time::HiRes qw( sleep );

use RlmModule;

plan skip_all => "module not built ($Module)" unless -f $Module;
plan skip_all => "rlm-sandboxd not built ($Sandboxd)" unless -x $Sandboxd;

my $Ctl = $ENV{RLM_SANDBOXCTL} || dirname_of($Sandboxd) . '/rlm-sandboxctl';
plan skip_all => "rlm-sandboxctl not built ($Ctl)" unless -x $Ctl;

my $top = tempdir('rlm-spares-XXXXXX', TMPDIR => 1, CLEANUP => 1);
my $running;

END { stop_nginx() if $running }

sub dirname_of { my ($p) = @_; $p =~ s{/[^/]*\z}{}; return $p }

my $server = <<'SERVER';
        location /v1/sessions { rlm_sessions_api; }
        location = /metrics { rlm_metrics; }
        location = /healthz { rlm_health; }
SERVER

sub http_conf {
    my ($dir, $extra) = @_;
    return <<"HTTP";
    rlm_sandboxd $Sandboxd;
    rlm_runtime_dir $dir/rt;
    rlm_pool_size 2;
$extra
HTTP
}

sub start {
    my ($name, $port, $extra) = @_;
    my $dir = "$top/$name";
    my ($ok, $out) = start_nginx($dir, $port, http_conf($dir, $extra),
                                 $server);
    ok($ok, "$name: nginx starts") or diag($out);
    $running = 1;
    ok(wait_until(\&healthy, 30), "$name: the manager answers");
    return $dir;
}

# and no worker crashed meanwhile (workers this suite kills die of 9)
sub stop {
    my ($dir) = @_;
    stop_nginx();
    $running = 0;
    open my $fh, '<', "$dir/logs/error.log" or return fail('no error.log');
    # (and, under make asan-test, no sanitizer report on stderr)
    my @bad = grep { /exited on signal (?!9\b)|\[emerg\]/
                     || /runtime error:|ERROR: AddressSanitizer/ } <$fh>;
    ok(!@bad, "$dir: no worker crashed") or diag(@bad);
}

sub healthy {
    my ($st, $doc) = json_http(GET => '/healthz');
    return $st == 200 && ($doc->{manager} // '') eq 'reachable';
}

sub metric {
    my ($name) = @_;
    my (undef, undef, $text) = http(GET => '/metrics');
    return $text =~ /^\Q$name\E (\d+)$/m ? $1 : undef;
}

sub spares       { metric('rlm_session_spares') }
sub from_spare   { metric('rlm_sessions_from_spare_total') }

# poll the gauge until it shows $n; true if it did
sub spares_reach {
    my ($n, $secs) = @_;
    return wait_until(sub { (spares() // -1) == $n }, $secs // 15);
}

sub create {
    my ($body) = @_;
    # ($status, $doc, $headers)
    return json_http(POST => '/v1/sessions',
                     defined $body ? encode_json($body) : '');
}

sub evalc {
    my ($id, $code) = @_;
    my ($st, $doc) = json_http(POST => "/v1/sessions/$id/eval",
                               encode_json({ code => $code }));
    return $doc;
}

sub listed {
    my ($st, $doc) = json_http(GET => '/v1/sessions');
    return $st == 200 ? scalar @{ $doc->{data} // [] } : -1;
}

sub sandbox_pid {
    my ($id) = @_;
    my ($st, $doc) = json_http(GET => "/v1/sessions/$id");
    return $doc->{sandbox}{pid};
}

# the manager's own count of sandboxes handed out (sessions + spares)
sub manager_stats {
    my ($dir) = @_;
    my $out = `$Ctl stats --manager $dir/rt/control.sock 2>/dev/null`;
    my ($line) = grep { /^\{/ } split /\n/, $out;
    return eval { decode_json($line // '') } // {};
}

# rewrite the config with $from replaced by $to, reload, and wait until
# only new workers serve
sub reload_with {
    my ($dir, $from, $to) = @_;
    my $file = "$dir/conf/nginx.conf";
    my $conf = do { local (@ARGV, $/) = $file; <> };
    $conf =~ s/\Q$from\E/$to/ or die "no '$from' in the config";
    open my $fh, '>', $file or die $!;
    print $fh $conf;
    close $fh;

    my %old = map { $_ => 1 } worker_pids();
    signal_nginx('HUP');
    return wait_until(sub {
        my @now = worker_pids();
        @now == 2 && !grep({ $old{$_} } @now)
            && !grep({ kill 0, $_ } keys %old);
    }, 20);
}

my $id_re = qr/^[0-9a-f]{32}$/;

# ---------------------------------------------------------------------
# 1. turned off

{
    my $dir = start('off', 19960, "    rlm_session_spares 0;");

    sleep 2.5;    # two janitor ticks: nothing must be acquired
    is(spares(), 0, 'off: the gauge is there and stays at 0');
    is(from_spare(), 0, 'off: no session from a spare');
    is(manager_stats($dir)->{live}, 0,
       'off: the manager has handed out no sandbox');

    my ($st, $doc) = create();
    is($st, 201, 'off: a session is created');
    like($doc->{id} // '', $id_re, 'off: with an id');
    $doc = evalc($doc->{id}, 'print(6 * 7)');
    is($doc->{stdout}, "42\n", 'off: and runs a cell');

    sleep 1.5;
    is(from_spare(), 0, 'off: the create took no spare');
    is(metric('rlm_sessions_created_total'), 1, 'off: it is counted');
    is(spares(), 0, 'off: and none is made afterwards');
    is(manager_stats($dir)->{live}, 1,
       'off: the manager holds only the session\'s sandbox');

    stop($dir);
}

# ---------------------------------------------------------------------
# 2, 3, 5, 6: two spares, a small output cap that a reload raises, then
# the manager killed

{
    my $dir = start('on', 19961, "    rlm_session_spares 2;\n"
                                 . "    rlm_output_max 1k;");

    ok(spares_reach(2), 'on: two spares are made') or diag(spares());
    is(listed(), 0, 'on: the spares are not listed as sessions');
    is(metric('rlm_sessions_live'), 0, 'on: nor counted as live sessions');
    is(from_spare(), 0, 'on: no session has taken one yet');
    is(manager_stats($dir)->{live}, 2,
       'on: the manager has handed out two sandboxes for them');

    my ($st, $doc) = create();
    is($st, 201, 'on: a session is created');
    my $a = $doc->{id};
    like($a // '', $id_re, 'on: with an id');
    is(from_spare(), 1, 'on: from a spare');
    is(metric('rlm_sessions_created_total'), 1, 'on: counted as created');
    is(metric('rlm_sessions_live'), 1, 'on: one live session');

    $doc = evalc($a, 'x = 1');
    is($doc->{status}, 'ok', 'on: its first cell runs');
    is($doc->{cell}, 1, 'on: as cell 1');
    $doc = evalc($a, 'print(x + 1)');
    is($doc->{status}, 'ok', 'on: the second one too');
    is($doc->{stdout}, "2\n", 'on: with the state of the first');

    ok(spares_reach(2), 'on: the spare is refilled') or diag(spares());
    is(listed(), 1, 'on: only the session is listed');

    ($st, $doc) = create();
    is($st, 201, 'on: a second session');
    my $b = $doc->{id};
    is(from_spare(), 2, 'on: also from a spare');
    isnt($b, $a, 'on: with another id');

    $doc = evalc($b, 'print(x)');
    is($doc->{status}, 'error', 'on: a variable of the first session...');
    is($doc->{error}{ename}, 'NameError', '...is a NameError in the second');
    $doc = evalc($b, 'y = 5');
    $doc = evalc($a, 'print(y)');
    is($doc->{error}{ename}, 'NameError', 'on: and the other way round');

    my ($pa, $pb) = (sandbox_pid($a), sandbox_pid($b));
    ok($pa && $pb, 'on: both sessions show a sandbox pid');
    isnt($pa, $pb, 'on: their sandboxes differ');

    # the cap of the spares: 1k
    $doc = evalc($a, "print('a' * 3000)");
    is($doc->{status}, 'output_truncated',
       'on: rlm_output_max 1k holds in a session from a spare');

    # --- 3. a client-chosen id

    ok(spares_reach(2), 'id: spares ready');
    my $mine = '0123456789abcdef0123456789abcdef';
    ($st, $doc) = create({ id => $mine });
    is($st, 201, 'id: a client id is accepted');
    is($doc->{id}, $mine, 'id: and kept');
    is(from_spare(), 2,
       'id: the session asked the manager (a spare has an id of its own)');
    $doc = evalc($mine, 'print("mine")');
    is($doc->{stdout}, "mine\n", 'id: and runs cells');

    ok(spares_reach(2), 'id: the spare is refilled');
    sleep 1.5;    # let any late refill finish before counting acquires
    my $s0 = manager_stats($dir);
    my $acq0 = ($s0->{warm_acquires} // 0) + ($s0->{cold_acquires} // 0);

    ($st, $doc) = create({ id => $mine });
    is($st, 409, 'id: the same id again is 409');
    is($doc->{error}{code}, 'session_exists', 'id: session_exists');
    is(from_spare(), 2, 'id: the 409 took no spare');

    sleep 1.5;
    is(spares(), 2, 'id: both spares are still there');
    my $s1 = manager_stats($dir);
    my $acq1 = ($s1->{warm_acquires} // 0) + ($s1->{cold_acquires} // 0);
    is($acq1, $acq0, 'id: and none had to be replaced');
    is($s1->{live}, 3 + 2, 'id: the manager holds 3 sessions + 2 spares');

    # --- 5. a reload that raises the output cap

    ok(reload_with($dir, 'rlm_output_max 1k;', 'rlm_output_max 16k;'),
       'reload: new workers serve with rlm_output_max 16k');
    my $fs0 = from_spare();

    # at once, while the old spares may still be in the zone
    ($st, $doc) = create();
    is($st, 201, 'reload: a session is created');
    my $c = $doc->{id};
    $doc = evalc($c, "print('a' * 3000)");
    is($doc->{status}, 'ok', 'reload: it has the new output cap');
    is(length($doc->{stdout} // ''), 3001, 'reload: all of the output');

    # and once new spares are made
    ok(spares_reach(2), 'reload: two spares after the reload');
    sleep 2;    # janitor ticks of the new workers
    ($st, $doc) = create();
    is($st, 201, 'reload: another session');
    my $d = $doc->{id};
    $doc = evalc($d, "print('a' * 3000)");
    is($doc->{status}, 'ok', 'reload: with the new cap too');
    $doc = evalc($d, "print('a' * 20000)");
    is($doc->{status}, 'output_truncated', 'reload: which still holds');
    ok(from_spare() > $fs0,
       'reload: spares were handed out after the reload');

    $doc = evalc($a, 'print(x)');
    is($doc->{stdout}, "1\n", 'reload: an old session keeps its state');

    # --- 6. the manager killed: its spares die with it

    ok(spares_reach(2), 'kill: spares ready');
    my $mgr = sandboxd_pid();
    ok($mgr, 'kill: found the manager');
    kill 'KILL', $mgr;
    ok(wait_until(sub { my $p = sandboxd_pid(); $p && $p != $mgr }, 20),
       'kill: a new manager is started');
    ok(wait_until(\&healthy, 20), 'kill: and answers');

    for my $i (1 .. 4) {
        ($st, $doc) = create();
        is($st, 201, "kill: session $i after the restart is created");
        my $sid = $doc->{id} // 'none';
        $doc = evalc($sid, 'x = 1');
        is($doc->{status}, 'ok', "kill: session $i runs x = 1")
            or diag(explain($doc));
        $doc = evalc($sid, 'print(x)');
        is($doc->{stdout}, "1\n", "kill: session $i keeps it");
    }

    ok(spares_reach(2, 20), 'kill: spares are made from the new manager');
    my $fs1 = from_spare();
    ($st, $doc) = create();
    is($st, 201, 'kill: one more session');
    is(from_spare(), $fs1 + 1, 'kill: from a new spare');
    $doc = evalc($doc->{id} // 'none', 'print("alive")');
    is($doc->{stdout}, "alive\n", 'kill: which works');

    $doc = evalc($a, 'print(x)');
    is($doc->{status}, 'sandbox_lost',
       'kill: a session from before the restart is lost, as before');

    stop($dir);
}

# ---------------------------------------------------------------------
# 4. spares and sessions within rlm_max_sessions

{
    my $dir = start('limit', 19962, "    rlm_session_spares 2;\n"
                                    . "    rlm_max_sessions 2;");

    ok(spares_reach(2), 'limit: two spares');
    sleep 1.5;
    is(manager_stats($dir)->{live}, 2, 'limit: two sandboxes handed out');

    my @ids;
    for my $i (1, 2) {
        my ($st, $doc) = create();
        is($st, 201, "limit: session $i created");
        push @ids, $doc->{id};
    }
    is(from_spare(), 2, 'limit: both from spares');

    sleep 1.5;
    is(spares(), 0, 'limit: no spare made at the limit');
    is(manager_stats($dir)->{live}, 2,
       'limit: the manager holds no more than rlm_max_sessions');

    my ($st, $doc, $h) = create();
    is($st, 503, 'limit: a third session is refused');
    is($doc->{error}{code}, 'session_limit', 'limit: with session_limit');
    ok(defined $h->{'retry-after'}, 'limit: and Retry-After');
    is(from_spare(), 2, 'limit: the refusal took no spare');

    ($st) = json_http(DELETE => "/v1/sessions/$ids[0]");
    is($st, 200, 'limit: one session deleted');

    ok(spares_reach(1), 'limit: room for one spare again');
    sleep 1.5;
    is(spares(), 1, 'limit: and only one');
    ok(wait_until(sub { (manager_stats($dir)->{live} // -1) == 2 }, 10),
       'limit: the manager holds session + spare, no more')
        or diag(explain(manager_stats($dir)));

    ($st, $doc) = create();
    is($st, 201, 'limit: a session can be created again');
    is(from_spare(), 3, 'limit: from the spare');
    $doc = evalc($doc->{id} // 'none', 'print(3)');
    is($doc->{stdout}, "3\n", 'limit: and runs');

    ($st, $doc) = create();
    is($st, 503, 'limit: full again');

    # a reload that turns spares off gives theirs back

    ($st) = json_http(DELETE => "/v1/sessions/$ids[1]");
    is($st, 200, 'lower: one session deleted');
    ok(spares_reach(1), 'lower: a spare takes its place');

    ok(reload_with($dir, 'rlm_session_spares 2;', 'rlm_session_spares 0;'),
       'lower: reloaded with rlm_session_spares 0');
    ok(spares_reach(0), 'lower: the spare is given up');
    ok(wait_until(sub { (manager_stats($dir)->{live} // -1) == 1 }, 10),
       'lower: the manager holds only the session\'s sandbox')
        or diag(explain(manager_stats($dir)));
    my $fs = from_spare();
    ($st, $doc) = create();
    is($st, 201, 'lower: sessions are still created');
    is(from_spare(), $fs, 'lower: without a spare');
    is(listed(), 2, 'lower: two sessions listed');

    stop($dir);
}

# ---------------------------------------------------------------------
# 8. the manager frozen: creates still work from spares; the workers
# killed while their refills wait for it: the new workers make spares

{
    # no directive: the default is 2
    my $dir = start('frozen', 19963, '');

    ok(spares_reach(2), 'frozen: two spares by default');
    my $mgr = sandboxd_pid();
    ok($mgr, 'frozen: found the manager');
    kill 'STOP', $mgr;

    my @ids;
    for my $i (1, 2) {
        my ($st, $doc) = create();
        is($st, 201, "frozen: session $i is created while the manager "
                     . "is stopped");
        push @ids, $doc->{id} // 'none';
        $doc = evalc($ids[-1], 'x = 40 + 2');
        is($doc->{status}, 'ok', "frozen: and runs a cell");
    }
    is(from_spare(), 2, 'frozen: both from spares');

    # the refills (3 ms after each create) now wait for the manager
    sleep 0.5;
    my @old = worker_pids();
    is(scalar @old, 2, 'frozen: two workers');
    kill 'KILL', @old;
    my %old = map { $_ => 1 } @old;
    ok(wait_until(sub {
        my @now = worker_pids();
        @now == 2 && !grep { $old{$_} } @now;
    }, 20), 'frozen: the workers are killed and replaced');

    kill 'CONT', $mgr;

    ok(spares_reach(2, 20),
       'frozen: the new workers make spares in place of the dead ones')
        or diag(spares());
    my ($st, $doc) = create();
    is($st, 201, 'frozen: a session after that');
    is(from_spare(), 3, 'frozen: from a spare');
    push @ids, $doc->{id} // 'none';
    $doc = evalc($ids[0], 'print(x)');
    is($doc->{stdout}, "42\n", 'frozen: the sessions made meanwhile live');

    # the dead workers' refills were answered into closed sockets: the
    # manager handed out two sandboxes nobody holds; the first worker's
    # sweep (every 10 s, sandboxes acquired 20 s ago or more) releases
    # them, and only them
    is(metric('rlm_sandbox_orphans_released_total'), 0,
       'orphans: none released yet');
    ok(wait_until(sub {
        (metric('rlm_sandbox_orphans_released_total') // 0) >= 2
    }, 60), 'orphans: the sweep releases the sandboxes nobody holds')
        or diag(explain(manager_stats($dir)));
    ok(wait_until(sub { (manager_stats($dir)->{live} // -1) == 3 + 2 }, 10),
       'orphans: the manager holds 3 sessions + 2 spares again')
        or diag(explain(manager_stats($dir)));
    sleep 11;    # one more sweep
    is(metric('rlm_sandbox_orphans_released_total'), 2,
       'orphans: exactly the two');
    for my $i (0 .. 2) {
        $doc = evalc($ids[$i], 'print("still")');
        is($doc->{stdout}, "still\n",
           "orphans: session $i (from a spare) keeps its sandbox");
    }

    stop($dir);
}

# ---------------------------------------------------------------------
# 9. a worker killed while it waited for the manager to open a session:
# the half-made session goes at expiry, its sandbox with the sweep

{
    my $dir = start('mid-create', 19964, "    rlm_session_spares 0;\n"
                                        . "    rlm_session_idle_timeout 1s;");

    my $mgr = sandboxd_pid();
    ok($mgr, 'mid-create: found the manager');
    kill 'STOP', $mgr;

    # a create that waits for the stopped manager
    my $sock = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                     PeerPort => 19964);
    ok($sock, 'mid-create: connected');
    print $sock "POST /v1/sessions HTTP/1.1\r\nHost: t\r\n"
                . "Content-Length: 0\r\n\r\n";
    ok(wait_until(sub { (metric('rlm_sessions_live') // 0) == 1 }, 3),
       'mid-create: the session being created holds a place');

    my @old = worker_pids();
    kill 'KILL', @old;
    my %old = map { $_ => 1 } @old;
    ok(wait_until(sub {
        my @now = worker_pids();
        @now == 2 && !grep { $old{$_} } @now;
    }, 20), 'mid-create: its worker is killed and replaced');
    close $sock;
    kill 'CONT', $mgr;

    ok(wait_until(sub { (metric('rlm_sessions_live') // -1) == 0 }, 10),
       'mid-create: the place is given back at expiry')
        or diag(metric('rlm_sessions_live'));
    ok(wait_until(sub { (manager_stats($dir)->{live} // -1) == 0 }, 60),
       'mid-create: the sandbox the manager handed out is released')
        or diag(explain(manager_stats($dir)));
    is(metric('rlm_sandbox_orphans_released_total'), 1,
       'mid-create: by the sweep');

    my ($st, $doc) = create();
    is($st, 201, 'mid-create: sessions are created as before');

    stop($dir);
}

# ---------------------------------------------------------------------
# 10. a binary upgrade: the new master's workers first reach the old
# binary's manager (they share its socket) and take spares from it; those
# die with it and must not be handed out

SKIP: {
    skip 'no binary upgrade under valgrind', 9
        if $ENV{TEST_NGINX_USE_VALGRIND};

    my $dir = start('upgrade', 19965, '');
    ok(spares_reach(2), 'upgrade: two spares');

    my $old = master_pid();
    signal_nginx('USR2');
    ok(wait_until(sub {
        my $p = master_pid();
        $p && $p != $old && -f "$dir/logs/nginx.pid.oldbin";
    }, 20), 'upgrade: a new master runs next to the old one');
    sleep 3;    # its workers make spares meanwhile

    kill 'QUIT', $old;
    ok(wait_until(sub { !kill 0, $old }, 30), 'upgrade: the old master left');
    ok(wait_until(\&healthy, 30), 'upgrade: the new manager answers');

    for my $i (1 .. 3) {
        my ($st, $doc) = create();
        $doc = evalc($doc->{id} // 'none', 'print("up")') if $st == 201;
        is($doc->{status}, 'ok', "upgrade: session $i works")
            or diag(explain($doc));
    }
    ok(spares_reach(2), 'upgrade: spares from the new manager');

    stop($dir);
}

# ---------------------------------------------------------------------
# 7. nginx -t

sub nginx_t {
    my ($http, $location) = @_;
    my $dir = "$top/t";
    make_path("$dir/logs");
    $location //= '';
    open my $fh, '>', "$dir/nginx.conf" or die $!;
    print $fh <<"CONF";
load_module $Module;
error_log stderr;
pid $dir/nginx.pid;
events {}
http {
    $http
    server {
        listen 127.0.0.1:19969;
        location / { $location }
    }
}
CONF
    close $fh;
    my $out = `$Nginx -t -p $dir/ -c $dir/nginx.conf 2>&1`;
    return ($? == 0, $out);
}

for my $good (0, 1, 64) {
    my ($ok, $out) = nginx_t("rlm_session_spares $good;");
    ok($ok, "nginx -t: rlm_session_spares $good loads") or diag($out);
}

{
    my ($ok, $out) = nginx_t('rlm_session_spares 65;');
    ok(!$ok, 'nginx -t: rlm_session_spares 65 is rejected');
    like($out, qr/"rlm_session_spares" directive must be between 0 and 64/,
         'nginx -t: with the bounds');

    for my $bad ('-1', 'abc') {
        ($ok, $out) = nginx_t("rlm_session_spares $bad;");
        ok(!$ok, "nginx -t: rlm_session_spares $bad is rejected");
        like($out, qr/"rlm_session_spares" directive/,
             "nginx -t: naming the directive ($bad)");
    }

    ($ok, $out) = nginx_t('rlm_session_spares 1 2;');
    ok(!$ok, 'nginx -t: two arguments are rejected');

    ($ok, $out) = nginx_t('', 'rlm_session_spares 2;');
    ok(!$ok, 'nginx -t: not in a location');
    like($out, qr/"rlm_session_spares" directive is not allowed here/,
         'nginx -t: placement message');
}

done_testing();
