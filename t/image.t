# The container image (`make image`, deploy/Containerfile) run by podman
# under runc and under gVisor (runsc): each serves /healthz, the eval API
# and a completion of the demo model, keeps sessions apart with the
# manager's own jail, and logs to stdout/stderr.  Under gVisor the
# manager refuses to start without its cgroups unless
# `rlm_sandbox_allow_missing cgroups;` says so (docs/deploy.md).
#
# Slow (containers, a manager per container): skipped unless RLM_IMAGE
# names a built image, which `make image-test` does and .ci/run runs.
#
#   make image && make image-test

use strict;
use warnings;

use File::Temp qw(tempdir);
use Test::More;

my $image = $ENV{RLM_IMAGE};
plan skip_all => 'RLM_IMAGE unset: run `make image && make image-test`'
    unless $image;

my @podman = split ' ', ($ENV{PODMAN} || 'podman --cgroup-manager=cgroupfs');
my @ulimits = ('--ulimit', 'nofile=16384:16384',
               '--ulimit', 'nproc=16384:16384');

my %runtime = (
    runc  => { global => [], run => [] },
    # gVisor: no network stack for the container here (the sandbox's own
    # netstack needs host setup this VM lacks); everything goes through
    # `podman exec`
    runsc => { global => ['--runtime=/usr/bin/runsc',
                          '--runtime-flag=network=none'],
               run    => ['--network=none'] },
);

my @names;

END {
    # our own containers only, by the names we gave them
    for my $n (@names) {
        system(@podman, 'rm', '-f', '-t', '0', $n) for 1;
    }
}

sub podman {
    my ($rt, @args) = @_;
    return (@podman, @{ $runtime{$rt}{global} }, @args);
}

sub run_cmd {
    my (@cmd) = @_;
    open(my $fh, '-|', @cmd) or die "@cmd: $!\n";
    local $/;
    my $out = <$fh>;
    close $fh;
    return ($? >> 8, defined $out ? $out : '');
}

# starts a container of the image; returns its name
sub start {
    my ($rt, @extra) = @_;
    my $name = "rlm-image-t-$rt-$$-" . scalar(@names);
    push @names, $name;
    my ($rc, $out) = run_cmd(podman($rt, 'run', '-d', '--name', $name,
                                     '--privileged', @ulimits,
                                     @{ $runtime{$rt}{run} }, @extra,
                                     $image));
    die "podman run ($rt): $out\n" if $rc;
    return $name;
}

# curl inside the container: (HTTP status, body)
sub http {
    my ($rt, $name, $method, $path, $body) = @_;
    my @cmd = podman($rt, 'exec', $name, 'curl', '-s', '-m', '60',
                     '-w', '\n%{http_code}', '-X', $method,
                     '-H', 'Content-Type: application/json');
    push @cmd, '--data-binary', $body if defined $body;
    my ($rc, $out) = run_cmd(@cmd, "http://127.0.0.1:8080$path");
    return (0, $out) if $rc;
    $out =~ s/\n(\d{3})\z// or return (0, $out);
    return ($1, $out);
}

# waits (bounded) for /healthz to answer 200, or the container to end
sub wait_healthy {
    my ($rt, $name) = @_;
    for (1 .. 240) {
        my ($status) = http($rt, $name, 'GET', '/healthz');
        return 1 if $status == 200;
        my ($rc, $state) = run_cmd(podman($rt, 'inspect', '-f',
                                          '{{.State.Running}}', $name));
        return 0 if $state !~ /true/;
        select(undef, undef, undef, 0.5);
    }
    return 0;
}

# the container's stdout and stderr, apart
sub logs {
    my ($rt, $name) = @_;
    my $dir = tempdir('rlm-image-logs-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    my $pid = fork() // die "fork: $!\n";
    if ($pid == 0) {
        open(STDOUT, '>', "$dir/out") or die;
        open(STDERR, '>', "$dir/err") or die;
        exec(podman($rt, 'logs', $name)) or exit 127;
    }
    waitpid($pid, 0);
    my %text;
    for my $f (qw(out err)) {
        open(my $fh, '<', "$dir/$f") or die "$dir/$f: $!\n";
        local $/;
        $text{$f} = <$fh> // '';
    }
    return ($text{out}, $text{err});
}

sub eval_cell {
    my ($rt, $name, $sid, $code) = @_;
    $code =~ s/\\/\\\\/g;
    $code =~ s/"/\\"/g;
    $code =~ s/\n/\\n/g;
    return http($rt, $name, 'POST', "/v1/sessions/$sid/eval",
                qq({"code": "$code"}));
}

sub new_session {
    my ($rt, $name) = @_;
    my ($status, $body) = http($rt, $name, 'POST', '/v1/sessions');
    return $status == 200 && $body =~ /"id":"([0-9a-f]+)"/ ? $1 : undef;
}

# the cgroups layer and the allow directive (gVisor, below)
my $allow = tempdir('rlm-image-XXXXXX', TMPDIR => 1, CLEANUP => 1);
chmod 0755, $allow;
{
    open(my $fh, '>', "$allow/allow.conf") or die "$allow: $!\n";
    print $fh "rlm_sandbox_allow_missing cgroups;\n";
    close $fh;
}

for my $rt (qw(runc runsc)) {
    my @extra;

    if ($rt eq 'runsc') {
        # Without the directive: no start, one message naming the layer.
        my $name = start($rt);
        my $exited = 0;
        for (1 .. 120) {
            my ($rc, $state) = run_cmd(podman($rt, 'inspect', '-f',
                                              '{{.State.Running}}', $name));
            if ($state !~ /true/) { $exited = 1; last }
            select(undef, undef, undef, 0.5);
        }
        ok($exited, "$rt: without the directive the container stops");
        my ($out, $err) = logs($rt, $name);
        like($err, qr/cgroups.*rlm_sandbox_allow_missing cgroups/,
             "$rt: the refusal names the layer and the directive")
            or diag($err);
        my ($rc, $code) = run_cmd(podman($rt, 'inspect', '-f',
                                         '{{.State.ExitCode}}', $name));
        isnt($code + 0, 0, "$rt: and exits with a failure status");

        @extra = ('-v', "$allow:/etc/ngx_rlm/conf.d:ro");
    }

    my $name = start($rt, @extra);
    ok(wait_healthy($rt, $name), "$rt: /healthz answers 200")
        or do { my ($o, $e) = logs($rt, $name); diag($e); next };

    my ($status, $body) = http($rt, $name, 'GET', '/healthz');
    like($body, qr/"manager":"reachable"/, "$rt: the manager is reachable");

    # the eval API
    my $sid = new_session($rt, $name);
    ok($sid, "$rt: a session is created");
    ($status, $body) = eval_cell($rt, $name, $sid, "x = 6 * 7\nprint(x)");
    is($status, 200, "$rt: eval answers 200");
    like($body, qr/"status":"ok"/, "$rt: the cell ran");
    like($body, qr/"stdout":"42\\n"/, "$rt: with its output");
    ($status, $body) = eval_cell($rt, $name, $sid, 'print(x + 1)');
    like($body, qr/"stdout":"43\\n"/, "$rt: the interpreter persists");

    # the demo model, through the whole loop
    ($status, $body) = http($rt, $name, 'POST', '/v1/chat/completions',
        '{"model": "rlm-demo", "messages": [{"role": "user", "content": '
        . '"What is the vault code?"}], "context": "line one\nthe vault '
        . 'code is 7-4-1-9\nline three"}');
    is($status, 200, "$rt: a demo completion answers 200");
    like($body, qr/"object":"chat\.completion"/, "$rt: a chat.completion");
    like($body, qr/7-4-1-9/, "$rt: the demo model found the code");

    # Sessions kept apart by the manager's jail, also under gVisor: one
    # session's file, process and uid are not another's; no network; no
    # new processes; pid 1 of its own namespace.
    my $a = new_session($rt, $name);
    my $b = new_session($rt, $name);
    ($status, $body) = eval_cell($rt, $name, $a,
        "import os\nopen('/tmp/mine', 'w').write('a')\n"
        . "print(os.getpid(), os.getuid(), sorted(os.listdir('/tmp')))");
    like($body, qr/"stdout":"1 (\d+) \['mine'\]\\n"/,
         "$rt: a session is pid 1 of its own namespace")
        or diag($body);
    my ($uid_a) = $body =~ /"stdout":"1 (\d+) /;
    ($status, $body) = eval_cell($rt, $name, $b,
        "import os\nprint(os.getpid(), os.getuid(), sorted(os.listdir('/tmp')))");
    like($body, qr/"stdout":"1 \d+ \[\]\\n"/,
         "$rt: another session sees nothing of the first one's /tmp")
        or diag($body);
    my ($uid_b) = $body =~ /"stdout":"1 (\d+) /;
    ok(defined $uid_a && defined $uid_b && $uid_a != $uid_b && $uid_a != 0,
       "$rt: each session runs as its own unprivileged uid");
    ($status, $body) = eval_cell($rt, $name, $b,
        "import socket\ntry:\n    socket.socket()\n    print('socket made')\n"
        . "except OSError as e:\n    print('refused', e.errno)");
    like($body, qr/"stdout":"refused 1\\n"/,
         "$rt: the seccomp filter refuses socket()") or diag($body);
    ($status, $body) = eval_cell($rt, $name, $b,
        "import os\ntry:\n    os.fork()\n    print('forked')\n"
        . "except OSError as e:\n    print('refused', e.errno)");
    like($body, qr/"stdout":"refused 1\\n"/,
         "$rt: and fork()") or diag($body);
    ($status, $body) = eval_cell($rt, $name, $b,
        "import os\nprint(os.path.exists('/usr/sbin/nginx'), "
        . "os.path.exists('/var/lib/ngx_rlm'), os.path.exists('/proc/1'))");
    like($body, qr/"stdout":"False False False\\n"/,
         "$rt: the jail root holds neither nginx nor the prefix nor /proc")
        or diag($body);

    # logs: the error log on stderr, the access log on stdout
    my ($out, $err) = logs($rt, $name);
    like($out, qr{"POST /v1/sessions/$a/eval HTTP/1\.1" 200},
         "$rt: the access log goes to stdout");
    like($err, qr/\[notice\].*rlm-sandboxd|sandbox manager/i,
         "$rt: the error log goes to stderr");

    # nginx's master is PID 1 (the entrypoint execs it)
    my ($rc, $comm) = run_cmd(podman($rt, 'exec', $name, 'cat',
                                     '/proc/1/cmdline'));
    like($comm, qr/^nginx: master process/, "$rt: nginx's master is PID 1");
}

done_testing();
