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
    # privileged, as deploy/k8s/statefulset.yaml runs it (why: there)
    runc  => { global => [], run => ['--privileged'] },
    # gVisor: no network stack for the container here (the sandbox's own
    # netstack needs host setup this VM lacks); everything goes through
    # `podman exec`
    # runsc refuses --privileged and --cap-add=ALL here; the manager
    # needs these three (namespaces, /dev nodes, its file limit)
    runsc => { global => ['--runtime=/usr/bin/runsc',
                          '--runtime-flag=network=none'],
               run    => ['--network=none',
                          '--cap-add=SYS_ADMIN,MKNOD,SYS_RESOURCE'] },
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
                                     @ulimits, '-e',
                                     'RLM_API_KEY=image-t-provider-key',
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
    my ($status, $body) = http($rt, $name, 'POST', '/v1/sessions', '{}');
    return $status == 201 && $body =~ /"id":"([0-9a-f]+)"/ ? $1 : undef;
}

# the cgroups layer and the allow directive (gVisor, below)
my $allow = tempdir('rlm-image-XXXXXX', TMPDIR => 1, CLEANUP => 1);
chmod 0755, $allow;
{
    open(my $fh, '>', "$allow/allow.conf") or die "$allow: $!\n";
    print $fh "rlm_sandbox_allow_missing cgroups root;\n";
    close $fh;
}

for my $rt (qw(runc runsc)) {
    my @extra;

    if ($rt eq 'runsc') {
        # Without the directive: the manager refuses to start, with one
        # message naming the missing layers and the directive; nginx keeps
        # restarting it (with backoff) and /healthz answers 503.
        my $name = start($rt);
        my ($out, $err);
        for (1 .. 240) {
            ($out, $err) = logs($rt, $name);
            last if $err =~ /refusing/;
            select(undef, undef, undef, 0.5);
        }
        like($err, qr/rlm-sandboxd: jail init: jail layers missing here: cgroups \(.+\), root \(.+\); refusing to run sandboxes without them unless "rlm_sandbox_allow_missing cgroups root;" accepts it/,
             "$rt: the manager refuses, naming the layers and the directive")
            or diag($err);
        my ($status) = http($rt, $name, 'GET', '/healthz');
        is($status, 503, "$rt: /healthz says the manager is not there");
        unlike($err, qr/serving .*control\.sock/,
               "$rt: the manager never served");

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

    # Sessions kept apart by the manager's jail, also under gVisor: each
    # is pid 1 of its own namespace, under its own unprivileged uid, in a
    # working directory no other session can read; no sockets, no fork,
    # no nginx environment; a forbidden system call kills it.
    my $a = new_session($rt, $name);
    my $b = new_session($rt, $name);
    ($status, $body) = eval_cell($rt, $name, $a,
        "import os\nopen('mine', 'w').write('secret a')\n"
        . "print(os.getpid(), os.getuid(), os.path.abspath('mine'))");
    like($body, qr/"stdout":"1 (\d+) (\/\S+)\\n"/,
         "$rt: a session is pid 1 of its own namespace")
        or diag($body);
    my ($uid_a, $file_a) = $body =~ /"stdout":"1 (\d+) (\S+)\\n"/;
    $file_a //= '/nonexistent';
    ($status, $body) = eval_cell($rt, $name, $b,
        "import os\ntry:\n    print(open('$file_a').read())\n"
        . "except OSError as e:\n    print('refused', type(e).__name__)\n"
        . "print(os.getpid(), os.getuid(), os.listdir('.'))");
    like($body, qr/"stdout":"refused \w+\\n1 \d+ \[\]\\n"/,
         "$rt: another session cannot read the first one's file")
        or diag($body);
    my ($uid_b) = $body =~ /\\n1 (\d+) /;
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
    like($body, qr/"stdout":"refused 1\\n"/, "$rt: and fork()")
        or diag($body);
    # gVisor shows the container's /proc to the sandbox (no mount of its
    # own), /proc/1/environ included, world-readable: the key must not be
    # in any process's environment there (nginx overwrites its own with
    # the process title; rlm-sandboxd starts with an empty one)
    ($status, $body) = eval_cell($rt, $name, $b,
        "import os\nfound = []\n"
        . "for p in (os.listdir('/proc') if os.path.isdir('/proc') else []):\n"
        . "    try:\n"
        . "        if b'image-t-provider-key' in open('/proc/%s/environ' % p, 'rb').read():\n"
        . "            found.append(p)\n"
        . "    except OSError:\n"
        . "        pass\n"
        . "print('found', found)");
    like($body, qr/"stdout":"found \[\]\\n"/,
         "$rt: the provider key is in no environment the sandbox can read")
        or diag($body);
    ($status, $body) = eval_cell($rt, $name, $b,
        "import ctypes\nctypes.CDLL(None, use_errno=True).unshare(0x10000000)");
    like($body, qr/"status":"crashed"/,
         "$rt: a forbidden system call kills the sandbox (seccomp)")
        or diag($body);
    # the minimal root (runc), or the chroot of hard links (gVisor)
    ($status, $body) = eval_cell($rt, $name, $a,
        "import os\nprint(os.path.exists('/usr/sbin/nginx'), "
        . "os.path.exists('/var/lib/ngx_rlm'), os.path.exists('/proc'), "
        . "os.path.exists('/etc'))");
    like($body, qr/"stdout":"False False False False\\n"/,
         "$rt: the sandbox's root holds no nginx, prefix, /proc or /etc")
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
