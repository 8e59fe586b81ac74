# Several nodes sharing sessions (docs/cluster.md): three nginx of the
# configuration `make run` writes (RLM_NODE_ID, RLM_NODES), each with its
# own prefix and its own sandbox manager, on loopback ports, behind a
# round-robin front (a plain nginx upstream, no stickiness), with the
# scripted model of t/lib/mock_llm.lua.  Checked:
#
#   * ids name their node; a session made through the front keeps its
#     state over evals that land on every node (x += 1);
#   * a completion continues that session through another node (header
#     and cookie), SSE through a forward included;
#   * auth on the receiving node, then again on the owner; the loop guard;
#   * a client-chosen id goes to the node it names, an unknown node's id
#     is refused;
#   * GET /v1/sessions on any node lists the caller's sessions of all
#     three nodes (the client's own key: another tenant sees none);
#   * the owner stopped (kill -STOP: it accepts connections, never
#     answers): its sessions get 503 node_unavailable within a bounded
#     wait, the listing names it unavailable, other nodes' sessions keep
#     working; kill -CONT and it serves the same session again;
#   * the owner killed: its sessions get a fast 503 node_unavailable with
#     Retry-After, other nodes' sessions keep working; the owner restarted
#     serves again and says its old sessions are gone.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/run_lib";

use File::Temp qw(tempdir);
use JSON::PP qw(encode_json decode_json);
use Test::More;
use Time::HiRes qw(time sleep);

use RlmRun;

our @front_dirs;
END { RlmRun::stop_nginx($_) for @front_dirs }

my $why = RlmRun::missing();
plan skip_all => $why if $why;

my ($mock, $mport) = RlmRun::start_mock();

my $KEY = 'sk-cluster-test-1';
my $KEY2 = 'sk-cluster-test-2';
my $keys = tempdir('rlm-keys-XXXXXX', TMPDIR => 1, CLEANUP => 1);
chmod 0755, $keys;
open my $kf, '>', "$keys/keys" or die "$keys: $!\n";
print $kf "$KEY  acme\n";
print $kf "$KEY2  zeta\n";
close $kf;
chmod 0644, "$keys/keys";

# three port pairs (node, its demo model) that do not overlap
my @port;
while (@port < 3) {
    my $p = RlmRun::free_port_pair();
    push @port, $p unless grep { abs($_ - $p) < 2 } @port;
}
my $nodes = join ' ', map { "$_=127.0.0.1:$port[$_]" } 0 .. 2;

my @run;
for my $i (0 .. 2) {
    $run[$i] = RlmRun::make_prefix(PORT => $port[$i],
                                   RLM_NODE_ID => $i,
                                   RLM_NODES => $nodes,
                                   RLM_KEYS_FILE => "$keys/keys",
                                   RLM_UPSTREAM_URL => "$mock/v1",
                                   RLM_MODEL => 'script:root',
                                   RLM_SUB_MODEL => 'script:sub');
    RlmRun::start_nginx($run[$i], $port[$i]);
}

my $front = start_front(@port);

my %auth = (Authorization => "Bearer $KEY");
my %json = (%auth, 'Content-Type' => 'application/json');

sub at {
    my ($port, $method, $uri, $body, $headers, $opts) = @_;
    my %h = (%json, %{ $headers || {} });
    delete $h{'Content-Type'} unless defined $body;
    return RlmRun::request('127.0.0.1', $port, $method, $uri, \%h, $body,
                           $opts);
}

sub eval_at {
    my ($port, $sid, $code, $opts) = @_;
    return at($port, 'POST', "/v1/sessions/$sid/eval",
              encode_json({ code => $code }), undef, $opts);
}

sub script {
    my ($id, @steps) = @_;
    my $r = RlmRun::request('127.0.0.1', $mport, 'POST', '/mock/script',
                            { 'Content-Type' => 'application/json' },
                            encode_json({ id => $id, steps => \@steps }));
    die "mock script $id: $r->{status} $r->{body}" unless $r->{status} == 200;
}

sub node_of { hex substr($_[0], 0, 2) }

# lines of a node's access log naming this text (a node writes the line
# once the request is over, which may be just after the client has its
# answer: the count is read again until it is at least $want, for 1 s)
sub log_count {
    my ($i, $text, $want) = @_;
    my $n;
    for (1 .. 20) {
        my $log = RlmRun::slurp("$run[$i]/logs/access.log") // '';
        $n = grep { index($_, $text) >= 0 } split /\n/, $log;
        last if !defined $want || $n >= $want;
        sleep 0.05;
    }
    return $n;
}

# --- ids name their node ------------------------------------------------

# rlm_node_id is 0..255 (nginx -t on a copy of node 0's configuration)
{
    my $copy = tempdir('rlm-conf-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    system("cp -a $run[0]/conf $copy/ && mkdir $copy/logs") == 0
        or die "copy: $?\n";
    my $ps = RlmRun::slurp("$copy/conf/policy-setup.conf");
    $ps =~ s/^rlm_node_id \d+;/rlm_node_id 256;/m or die "no rlm_node_id\n";
    open my $fh, '>', "$copy/conf/policy-setup.conf" or die "$copy: $!\n";
    print $fh $ps;
    close $fh;
    my $out = `$RlmRun::Nginx -t -p $copy/ -c conf/rlm.conf -e logs/e.log 2>&1`;
    isnt($?, 0, 'rlm_node_id 256: nginx -t fails');
    like($out, qr/rlm_node_id/, '... naming the directive') or diag($out);
}

my %made;
for my $i (0 .. 2) {
    my $s = at($port[$i], 'POST', '/v1/sessions', '{}');
    is($s->{status}, 201, "node $i makes a session") or diag($s->{body});
    my $id = $s->{json} && $s->{json}{id} // '';
    is(node_of($id), $i, "node $i: its id starts with " . sprintf '%02x', $i);
    $made{$i} = $id;
}

# --- state kept over evals that land on every node --------------------

my $s = at($front, 'POST', '/v1/sessions', '{}');
is($s->{status}, 201, 'a session made through the front') or diag($s->{body});
my $sid = $s->{json}{id};
my $owner = node_of($sid);
ok($owner >= 0 && $owner <= 2, "its id names node $owner");
my @other = grep { $_ != $owner } 0 .. 2;

my $before = log_count($owner, "/v1/sessions/$sid/eval");
my @out;
for my $n (1 .. 9) {
    my $r = eval_at($front, $sid, "x = globals().get('x', 0) + 1\nprint(x)");
    push @out, $r->{status} == 200 ? $r->{json}{stdout} : "$r->{status}";
}
is_deeply(\@out, [ map { "$_\n" } 1 .. 9 ],
          'nine evals through the front: x += 1 each time, state kept');
for my $i (0 .. 2) {
    my $want = $i == $owner ? 9 : 3;
    ok(log_count($i, "/v1/sessions/$sid/eval", $want) >= $want,
       "node $i received evals of the session"
       . ($i == $owner ? ' (all nine: it is the owner)' : ''));
}
is(log_count($owner, "/v1/sessions/$sid/eval", $before + 9) - $before, 9,
   'the owner ran every one');

my $g = at($port[$other[0]], 'GET', "/v1/sessions/$sid");
is($g->{status}, 200, 'GET /v1/sessions/{id} through another node');
is($g->{json} && $g->{json}{cells}, 9, '... the owner\'s record (9 cells)');

# --- completions continuing the session through another node ----------

script('root',
       { content => "```repl\nx += 100\nprint('x is', x)\n```" },
       { content => 'FINAL(continued)' });

my $c = at($port[$other[0]], 'POST', '/v1/chat/completions', encode_json({
    model => 'script:root',
    messages => [ { role => 'user', content => 'go on' } ],
}), { 'X-RLM-Session-Id' => $sid });
is($c->{status}, 200, 'completion with X-RLM-Session-Id through a non-owner')
    or diag($c->{body});
is($c->{json} && $c->{json}{choices}[0]{message}{content}, 'continued',
   '... the model\'s answer');
is($c->{headers}{'x-rlm-session-id'}, $sid, '... in the same session');
is(eval_at($port[$other[1]], $sid, 'print(x)')->{json}{stdout}, "109\n",
   '... whose code ran in the session\'s REPL (x = 109)');
like($c->{json} && $c->{json}{id} // '', qr/^chatcmpl-${\ sprintf '%02x', $owner}/,
     '... the completion id made by the owner names it');

# the cookie, and SSE through a forward
script('root',
       { content => "```repl\nx += 1\n```" },
       { content => 'FINAL(streamed)' });
my $t0 = time;
my $e = at($port[$other[1]], 'POST', '/v1/chat/completions', encode_json({
    model => 'script:root', stream => JSON::PP::true,
    messages => [ { role => 'user', content => 'stream it' } ],
}), { Cookie => "rlm_session=$sid" });
is($e->{status}, 200, 'SSE completion with the cookie through a non-owner')
    or diag($e->{body});
like($e->{headers}{'content-type'} // '', qr{^text/event-stream},
     '... an event stream');
like($e->{body}, qr/streamed/, '... with the answer');
like($e->{body}, qr/data: \[DONE\]\s*$/, '... to its end');
is(eval_at($front, $sid, 'print(x)')->{json}{stdout}, "110\n",
   '... in the same session (x = 110)');

my $tr = at($port[$other[0]], 'GET', "/v1/sessions/$sid/trajectories");
is($tr->{status}, 200, 'trajectories of the session through a non-owner');
is(ref $tr->{json} eq 'HASH' && scalar @{ $tr->{json}{data} || [] }, 2,
   '... the two completions the owner ran');

# --- auth, the loop guard, ids chosen by the client ------------------

my $before_owner = log_count($owner, "/v1/sessions/$sid ");
my $bad = at($port[$other[0]], 'GET', "/v1/sessions/$sid", undef,
             { Authorization => 'Bearer sk-wrong' });
is($bad->{status}, 401, 'a bad key: 401 on the receiving node');
is(RlmRun::error_code($bad), 'invalid_api_key', '... invalid_api_key');
sleep 0.2;
is(log_count($owner, "/v1/sessions/$sid "), $before_owner,
   '... and nothing reached the owner');

my $none = RlmRun::request('127.0.0.1', $port[$other[0]], 'GET',
                           "/v1/sessions/$sid");
is($none->{status}, 401, 'no key: 401');

my $loop = at($port[$other[0]], 'GET', "/v1/sessions/$sid", undef,
              { 'X-RLM-Forwarded' => '7' });
is($loop->{status}, 404, 'X-RLM-Forwarded: served where it lands (no hop)');
is(RlmRun::error_code($loop), 'session_not_found', '... session_not_found');

my $want = sprintf('%02x', $other[1]) . ('5a' x 15);
my $cc = at($port[$other[0]], 'POST', '/v1/sessions',
            encode_json({ id => $want }));
is($cc->{status}, 201, "a client-chosen id naming node $other[1], sent to "
                       . "node $other[0]: made") or diag($cc->{body});
is(eval_at($port[$other[1]], $want, 'print(7)')->{status}, 200, "... on node $other[1]");

my $ff = at($port[0], 'POST', '/v1/sessions',
            encode_json({ id => 'ff' . ('5a' x 15) }));
is($ff->{status}, 400, 'an id naming no node: 400');
is(RlmRun::error_code($ff), 'invalid_session_id', '... invalid_session_id');

# --- GET /v1/sessions: the whole cluster's -----------------------------

my @all = sort(values(%made), $sid, $want);
for my $via ($front, @port) {
    my $l = at($via, 'GET', '/v1/sessions');
    my ($n) = grep { $port[$_] == $via } 0 .. 2;
    my $where = $via == $front ? 'the front' : "node $n";
    is($l->{status}, 200, "GET /v1/sessions through $where")
        or diag($l->{body});
    my @ids = sort map { $_->{id} } @{ $l->{json} && $l->{json}{data} || [] };
    is_deeply(\@ids, \@all, '... lists the sessions of all three nodes');
    is_deeply($l->{json} && $l->{json}{unavailable_nodes}, [],
              '... every node answered');
}

my $z = at($port[0], 'GET', '/v1/sessions', undef,
           { Authorization => "Bearer $KEY2" });
is($z->{status}, 200, 'another tenant lists');
is_deeply($z->{json} && $z->{json}{data}, [],
          '... none of acme\'s sessions on any node (its own key went out)');
my $zl = at($port[1], 'GET', '/v1/sessions', undef,
            { Authorization => 'Bearer sk-wrong' });
is($zl->{status}, 401, 'listing with a bad key: 401');

# --- the owner stopped: accepts connections, never answers ---------------

my @stopped = node_pids($owner);
kill 'STOP', @stopped;

# a request already forwarded before the others noticed waits for the
# owner (proxy_read_timeout): each try gives up after 4 s on its own
# side; within 20 s one must be a 503
my ($t0s, $st) = (time, undef);
while (time - $t0s < 20) {
    $st = eval_at($port[$other[0]], $sid, 'print(x)', { timeout => 4 });
    last if $st->{status};
}
my $waited = time - $t0s;
is($st->{status}, 503, 'owner stopped, eval through another node: 503')
    or diag("$st->{status} $st->{body}");
is(RlmRun::error_code($st), 'node_unavailable', '... node_unavailable');
ok(($st->{headers}{'retry-after'} // '') =~ /^\d+$/, '... Retry-After');
ok($waited < 20, sprintf('... within a bounded wait (%.1f s)', $waited));

# now marked down: at once, from the other node too
my $st2 = eval_at($port[$other[1]], $sid, 'print(x)', { timeout => 10 });
is($st2->{status}, 503, '... and through the third node: 503');
is(RlmRun::error_code($st2), 'node_unavailable', '... node_unavailable');

for my $n (1 .. 3) {
    my $r = eval_at($port[$other[1]], $made{ $other[0] }, "print($n)");
    is($r->{status} == 200 && $r->{json}{stdout}, "$n\n",
       "owner stopped: another node's session, eval $n: works");
}

my $ls = at($port[$other[0]], 'GET', '/v1/sessions', undef, undef,
            { timeout => 20 });
is($ls->{status}, 200, 'owner stopped: GET /v1/sessions answers');
is_deeply($ls->{json} && $ls->{json}{unavailable_nodes}, [ $owner ],
          '... naming the stopped node');
my @lids = sort map { $_->{id} } @{ $ls->{json} && $ls->{json}{data} || [] };
is_deeply(\@lids, [ sort grep { node_of($_) != $owner } @all ],
          '... with the other nodes\' sessions');

kill 'CONT', @stopped;
my $back;
for (1 .. 100) {
    $back = eval_at($port[$other[0]], $sid, 'print(x)', { timeout => 10 });
    last if $back->{status} == 200;
    sleep 0.2;
}
is($back->{status}, 200, 'kill -CONT: the session serves again')
    or diag($back->{body});
is($back->{json} && $back->{json}{stdout}, "110\n", '... with its state');

# --- the owner killed ------------------------------------------------

my $live = $made{ $other[0] };
kill_node($owner);

for my $via ($front, $port[$other[0]], $port[$other[1]]) {
    my $t = time;
    my $r = eval_at($via, $sid, 'print(x)');
    my $took = time - $t;
    my $where = $via == $front ? 'the front' : 'another node';
    is($r->{status}, 503, "owner dead, eval through $where: 503")
        or diag($r->{body});
    is(RlmRun::error_code($r), 'node_unavailable', '... node_unavailable');
    is(RlmRun::envelope_problem($r), '', '... in the envelope');
    ok(($r->{headers}{'retry-after'} // '') =~ /^\d+$/, '... Retry-After');
    ok($took < 2, sprintf('... fast (%.3f s)', $took));
}

my $cd = at($port[$other[0]], 'POST', '/v1/chat/completions', encode_json({
    model => 'script:root',
    messages => [ { role => 'user', content => 'x' } ],
}), { 'X-RLM-Session-Id' => $sid }, { timeout => 5 });
is($cd->{status}, 503, 'owner dead, completion: 503');
is(RlmRun::error_code($cd), 'node_unavailable', '... node_unavailable');

my $lk = at($port[$other[1]], 'GET', '/v1/sessions');
is($lk->{status}, 200, 'owner dead: GET /v1/sessions answers');
is_deeply($lk->{json} && $lk->{json}{unavailable_nodes}, [ $owner ],
          '... naming the dead node');

for my $n (1 .. 4) {
    my $r = eval_at($front, $live, "print($n)");
    is($r->{status} == 200 && $r->{json}{stdout}, "$n\n",
       "another node's session through the front, eval $n: works");
}

# --- the owner restarted ---------------------------------------------

RlmRun::start_nginx($run[$owner], $port[$owner]);

# the other nodes see it back at their next probe (once a second): until
# then they answer 503 node_unavailable with Retry-After, as for any
# node marked down
my $gone;
for (1 .. 30) {
    $gone = eval_at($port[$other[0]], $sid, 'print(x)');
    last unless $gone->{status} == 503
                && RlmRun::error_code($gone) eq 'node_unavailable';
    select(undef, undef, undef, 0.5);
}
is($gone->{status}, 404, 'owner back: its old session is gone (404)')
    or diag($gone->{body});
is(RlmRun::error_code($gone), 'session_not_found',
   '... session_not_found, the owner\'s answer through the forward');

# and the third node too, before the front sends to every node
for (1 .. 30) {
    my $r = eval_at($port[$other[1]], $sid, 'print(x)');
    last unless $r->{status} == 503
                && RlmRun::error_code($r) eq 'node_unavailable';
    select(undef, undef, undef, 0.5);
}

my $n2 = at($port[$owner], 'POST', '/v1/sessions', '{}');
is($n2->{status}, 201, 'owner back: makes sessions');
my $nid = $n2->{json} && $n2->{json}{id} // '';
is(node_of($nid), $owner, '... with its id');
@out = ();
for my $n (1 .. 6) {
    my $r = eval_at($front, $nid, "y = globals().get('y', 0) + 1\nprint(y)");
    push @out, $r->{status} == 200 ? $r->{json}{stdout} : "$r->{status}";
}
is_deeply(\@out, [ map { "$_\n" } 1 .. 6 ],
          '... served through the front from every node again');

done_testing();


# ---------------------------------------------------------------------

# a plain nginx: one upstream of the three nodes, round robin, no
# stickiness -> its port
sub start_front {
    my (@ports) = @_;
    my $port = RlmRun::free_port();
    my $dir = tempdir('rlm-front-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    mkdir "$dir/$_" for qw(conf logs);

    my $servers = join '', map { "        server 127.0.0.1:$_;\n" } @ports;

    open my $fh, '>', "$dir/conf/nginx.conf" or die "$dir: $!\n";
    print $fh <<"CONF";
worker_processes 1;
error_log logs/error.log info;
pid logs/nginx.pid;
events { worker_connections 256; }
http {
    access_log off;
    upstream nodes {
$servers    }
    server {
        listen 127.0.0.1:$port;
        location / {
            proxy_pass http://nodes;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_connect_timeout 1s;
        }
    }
}
CONF
    close $fh;

    system("$RlmRun::Nginx -p $dir/ -c conf/nginx.conf -e logs/error.log"
           . " >/dev/null 2>&1") == 0
        or die "the front did not start:\n"
               . (RlmRun::slurp("$dir/logs/error.log") // '');

    push @front_dirs, $dir;

    for (1 .. 100) {
        my $r = RlmRun::request('127.0.0.1', $port, 'GET', '/healthz');
        return $port if $r->{status};
        sleep 0.05;
    }
    die "the front does not answer\n";
}



# the node's nginx: its master and workers (not its sandbox manager)
sub node_pids {
    my ($i) = @_;
    my $pid = RlmRun::slurp("$run[$i]/logs/nginx.pid") // '';
    ($pid) = $pid =~ /^(\d+)/ or die "node $i: no pid\n";
    my @kids = map { /(\d+)/ ? $1 : () } `ps -o pid= --ppid $pid`;
    return $pid, grep { (RlmRun::slurp("/proc/$_/comm") // '') !~ /sandboxd/ }
                 @kids;
}


# the node's master and workers killed (SIGKILL), its sandbox manager
# stopped, as a node that dies
sub kill_node {
    my ($i) = @_;
    my $pid = RlmRun::slurp("$run[$i]/logs/nginx.pid") // '';
    ($pid) = $pid =~ /^(\d+)/ or die "node $i: no pid\n";

    # (ps hangs with the ASan runtime preloaded, as make asan-test does)
    my @kids = do {
        delete local $ENV{LD_PRELOAD};
        map { /(\d+)/ ? $1 : () } `ps -o pid= --ppid $pid`;
    };
    my @mgr = grep { (RlmRun::slurp("/proc/$_/comm") // '') =~ /sandboxd/ }
              @kids;
    my %mgr = map { $_ => 1 } @mgr;

    kill 'KILL', $pid, grep { !$mgr{$_} } @kids;
    kill 'TERM', @mgr;

    for (1 .. 200) {
        last unless grep { kill 0, $_ } $pid, @kids;
        sleep 0.05;
    }
    kill 'KILL', grep { kill 0, $_ } @mgr;
    unlink "$run[$i]/logs/nginx.pid";
}
