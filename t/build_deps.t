# .ci/install-deps (run by `make`) must never stop, disable or kill what
# the project did not start, must install packages without letting their
# maintainer scripts start, stop or reload a service, and must leave
# /usr/sbin/policy-rc.d (a file other tools own) as it found it.
#
# The script runs as it would as root with packages missing, but with
# fakes first in PATH: `id` says root, `dpkg-query` says nothing is
# installed, `apt-get install` plays a maintainer script that asks for
# every service action Debian's scripts use, and the commands those
# actions reach (invoke-rc.d, deb-systemd-invoke, service, systemctl) and
# the ones that stop processes (pkill, killall) are stand-ins that only
# write down that they were called.  A real nginx, started here on a
# random port, must still be serving afterwards.

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(dirname);
use File::Temp qw(tempdir);
use Digest::SHA qw(sha256_hex);
use IO::Socket::INET;
use Test::More;

my $top = abs_path(dirname(__FILE__) . '/..');
my $nginx = $ENV{TEST_NGINX_BINARY} || '/usr/sbin/nginx';

plan skip_all => "no nginx at $nginx" unless -x $nginx;

my $tmp = tempdir('rlm-deps-XXXXXX', TMPDIR => 1, CLEANUP => 1);
my $log = "$tmp/calls.log";

sub write_file {
    my ($path, $text, $mode) = @_;
    open my $fh, '>', $path or die "$path: $!";
    print $fh $text;
    close $fh;
    chmod $mode, $path if defined $mode;
}

sub slurp {
    my ($path) = @_;
    open my $fh, '<', $path or return '';
    local $/;
    return scalar <$fh>;
}

# the fakes the script calls itself
mkdir "$tmp/fake";

write_file("$tmp/fake/id", <<'EOF', 0755);
#!/bin/sh
[ "$1" = -u ] && { echo 0; exit 0; }
exec /usr/bin/id "$@"
EOF

write_file("$tmp/fake/dpkg-query", "#!/bin/sh\nexit 1\n", 0755);

# apt-get: `install` runs what a package's postinst does for a service
write_file("$tmp/fake/apt-get", <<'EOF', 0755);
#!/bin/sh
echo "apt-get $*" >> "$RLM_CALLS"
case " $* " in
*" install "*)
    invoke-rc.d nginx start
    invoke-rc.d nginx restart
    invoke-rc.d nginx reload
    deb-systemd-invoke start nginx.service
    deb-systemd-invoke restart nginx.service
    service nginx start
    systemctl start nginx.service
    systemctl --system daemon-reload
    systemctl disable --now nginx.service
    systemctl is-enabled nginx.service
    [ "$RLM_APT_FAIL" != exit ] || exit 100
    [ "$RLM_APT_FAIL" != signal ] || kill -TERM $PPID
    ;;
esac
exit 0
EOF

# the real commands' stand-ins, after the fakes in PATH: each call that
# reaches one is written down
mkdir "$tmp/sbin";

for my $cmd (qw(invoke-rc.d deb-systemd-invoke service systemctl pkill
                killall))
{
    write_file("$tmp/sbin/$cmd",
               "#!/bin/sh\necho \"REAL \$(basename \"\$0\") \$*\""
               . " >> \"\$RLM_CALLS\"\n", 0755);
}

# a running nginx the script did not start
my $port = do {
    my $s = IO::Socket::INET->new(Listen => 1, LocalAddr => '127.0.0.1',
                                  LocalPort => 0, ReuseAddr => 1)
        or die "no free port: $!";
    $s->sockport;
};

mkdir "$tmp/nginx";
mkdir "$tmp/nginx/$_" for qw(conf logs);

write_file("$tmp/nginx/conf/nginx.conf", <<"EOF");
daemon on;
master_process on;
worker_processes 1;
pid logs/nginx.pid;
error_log logs/error.log;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path body;
    server {
        listen 127.0.0.1:$port;
        location / { return 200 "alive\\n"; }
    }
}
EOF

is(system($nginx, '-p', "$tmp/nginx", '-c', 'conf/nginx.conf',
          '-e', 'logs/error.log'), 0, 'an nginx we do not own starts');

chomp(my $nginx_pid = slurp("$tmp/nginx/logs/nginx.pid"));
ok($nginx_pid =~ /^\d+$/, "its master is $nginx_pid");

END {
    # only the nginx this test started, by its pid
    kill 'QUIT', $nginx_pid if $nginx_pid && $nginx_pid =~ /^\d+$/;
}

sub serving {
    my $c = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Timeout => 5)
        or return 0;
    print $c "GET / HTTP/1.0\r\nHost: x\r\n\r\n";
    local $/;
    my $reply = <$c> // '';
    return $reply =~ /^HTTP\/1\.\d 200.*alive/s;
}

ok(serving(), 'it serves before the script runs');

# /usr/sbin/policy-rc.d as it is now (or its absence)
my $policy = '/usr/sbin/policy-rc.d';

sub policy_state {
    return 'absent' unless -e $policy || -l $policy;
    my @st = lstat $policy;
    return join ' ', -l $policy ? 'link:' . readlink($policy) : 'file',
                     sprintf('%o', $st[2]), "uid $st[4]", "size $st[7]",
                     "mtime $st[9]", 'sha256 ' . substr(sha256_hex(
                         slurp($policy)), 0, 16);
}

my $policy_before = policy_state();

sub run_deps {
    my (%env) = @_;

    unlink $log;
    mkdir "$tmp/scratch";

    local $ENV{PATH} = "$tmp/fake:$tmp/sbin:/usr/bin:/bin";
    local $ENV{RLM_CALLS} = $log;
    local $ENV{TMPDIR} = "$tmp/scratch";
    local $ENV{RLM_APT_FAIL} = $env{fail} // '';

    my $out = `sh '$top/.ci/install-deps' 2>&1`;
    return ($? >> 8, $out);
}

for my $case ([ 'install', '' ], [ 'failed install', 'exit' ],
              [ 'killed install', 'signal' ])
{
    my ($name, $fail) = @$case;

    my ($rc, $out) = run_deps(fail => $fail);
    my $calls = slurp($log);

    if ($fail) {
        isnt($rc, 0, "$name: the script fails");
    } else {
        is($rc, 0, "$name: the script succeeds") or diag($out);
    }

    like($calls, qr/^apt-get .*install .*nginx/m,
         "$name: it installs the missing packages") or diag($calls);

    unlike($calls, qr/^REAL (invoke-rc\.d|deb-systemd-invoke|service) /m,
           "$name: no service action reaches the init system")
        or diag($calls);

    unlike($calls, qr/^REAL systemctl .*\b(start|stop|restart|reload
                                           |disable|kill|--now)\b/mx,
           "$name: systemctl starts, stops or disables nothing")
        or diag($calls);

    unlike($calls, qr/^REAL (pkill|killall)/m,
           "$name: nothing is killed by name") or diag($calls);

    like($calls, qr/^REAL systemctl --system daemon-reload$/m,
         "$name: other systemctl calls reach systemctl");

    like($calls, qr/^REAL systemctl is-enabled nginx\.service$/m,
         "$name: queries reach systemctl");

    like($out, qr/not running: invoke-rc\.d nginx start/,
         "$name: a refused action is reported");

    ok(serving(), "$name: the running nginx still serves");
    ok(kill(0, $nginx_pid), "$name: its master $nginx_pid is alive");

    is(policy_state(), $policy_before,
       "$name: $policy is as it was ($policy_before)");

    opendir my $d, "$tmp/scratch" or die;
    my @left = grep { !/^\.\.?$/ } readdir $d;
    is("@left", '', "$name: the script leaves nothing in TMPDIR");
}

done_testing();
