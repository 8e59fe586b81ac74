# `make install DESTDIR=...`: what goes where, the load_module snippet, and
# an nginx that uses only what was installed (the module through its
# modules-available snippet, rlm-sandboxd, the Lua library from the
# installed lua_package_path location) passes `nginx -t` and, as root,
# answers an eval cell and a completion of the demo model.
#
# The installed paths are relative to DESTDIR here; the Debian package,
# installed into a clean Debian root with the stock nginx, is tested by
# .ci/deb-test (slow, root only, run by .ci/run).

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(dirname);
use File::Find;
use File::Temp qw(tempdir);
use HTTP::Tiny;
use IO::Socket::INET;
use Test::More;

my $top = abs_path(dirname(__FILE__) . '/..');
my $build = $ENV{RLM_BUILD} || "$top/build";
my $nginx = $ENV{TEST_NGINX_BINARY} || '/usr/sbin/nginx';
my $mods = '/usr/lib/nginx/modules';

plan skip_all => "no build in $build (make)"
    unless -f "$build/ngx_http_rlm_module.so"
           && -x "$build/bin/rlm-sandboxd";
plan skip_all => "no lua module in $mods"
    unless -f "$mods/ngx_http_lua_module.so";

# short: the runtime directory's sockets must fit a unix socket address
my $tmp = tempdir('rlm-inst-XXXXXX', DIR => '/tmp', CLEANUP => !$ENV{RLM_KEEP});
my $root = "$tmp/root";

# nginx's workers (nobody, when we are root) reach the manager's sockets
# under it
chmod 0755, $tmp;

sub slurp {
    my ($path) = @_;
    open my $fh, '<', $path or return '';
    local $/;
    return scalar <$fh>;
}

sub write_file {
    my ($path, $text) = @_;
    open my $fh, '>', $path or die "$path: $!";
    print $fh $text;
    close $fh;
}

my $out = `make -s -C '$top' install NO_DEPS=1 BUILD='$build' DESTDIR='$root' 2>&1`;
is($?, 0, 'make install DESTDIR=... succeeds') or diag($out);

# what was installed, and with which mode
my %got;
find({ no_chdir => 1, wanted => sub {
    return if -d $_;
    (my $rel = $_) =~ s/^\Q$root\E//;
    $got{$rel} = sprintf '%o', (stat $_)[2] & 07777;
} }, $root);

my %want = (
    '/usr/lib/nginx/modules/ngx_http_rlm_module.so' => 644,
    '/usr/share/nginx/modules-available/mod-http-rlm.conf' => 644,
    '/usr/lib/ngx_rlm/rlm-sandboxd' => 755,
    '/usr/bin/rlm-sandboxctl' => 755,
    '/usr/share/lua/5.1/resty/rlm.lua' => 644,
    '/lib/systemd/system/rlm-sandboxd.service' => 644,
    '/usr/share/doc/ngx_rlm/README.md' => 644,
);

for my $f (glob "$top/lua/rlm/*.lua") {
    $want{'/usr/share/lua/5.1/rlm/' . (split m{/}, $f)[-1]} = 644;
}
for my $f (glob("$top/conf/*.conf"), glob("$top/conf/*.json")) {
    $want{'/etc/nginx/rlm/' . (split m{/}, $f)[-1]} = 644;
}
for my $f (glob "$top/docs/*.md") {
    $want{'/usr/share/doc/ngx_rlm/' . (split m{/}, $f)[-1]} = 644;
}

for my $f (sort keys %want) {
    is($got{$f}, $want{$f}, "installed $f, mode $want{$f}");
}

my @extra = grep { !exists $want{$_} } sort keys %got;
is("@extra", '', 'nothing else is installed');

is(slurp("$root/usr/share/nginx/modules-available/mod-http-rlm.conf"),
   "load_module modules/ngx_http_rlm_module.so;\n",
   'the modules-available snippet loads the module from nginx\'s '
   . 'modules directory, as Debian\'s mod-http-*.conf do');

like(slurp("$root/lib/systemd/system/rlm-sandboxd.service"),
     qr{^ExecStart=/usr/lib/ngx_rlm/rlm-sandboxd [^\n]*(?:\\\n[^\n]*)*
        --keep-on-orphan}mx,
     'the unit runs the installed manager, which outlives no parent');

# PREFIX moves what is not nginx's
my $local = "$tmp/local";
$out = `make -s -C '$top' install NO_DEPS=1 BUILD='$build' DESTDIR='$local' PREFIX=/usr/local 2>&1`;
is($?, 0, 'make install PREFIX=/usr/local succeeds') or diag($out);

for my $f ('/usr/local/lib/ngx_rlm/rlm-sandboxd',
           '/usr/local/share/lua/5.1/rlm/policy.lua',
           '/usr/local/etc/nginx/rlm/rlm.conf',
           '/usr/local/lib/systemd/system/rlm-sandboxd.service',
           '/usr/lib/nginx/modules/ngx_http_rlm_module.so',
           '/usr/share/nginx/modules-available/mod-http-rlm.conf')
{
    ok(-f "$local$f", "PREFIX=/usr/local: $f");
}

like(slurp("$local/usr/local/lib/systemd/system/rlm-sandboxd.service"),
     qr{^ExecStart=/usr/local/lib/ngx_rlm/rlm-sandboxd }m,
     'PREFIX=/usr/local: the unit runs the manager there');

# An nginx of what was installed.  Its prefix stands for Debian's
# /usr/share/nginx: modules/ holds the installed module beside Debian's
# ndk and lua modules, so the snippets' relative paths resolve as they do
# in /usr/share/nginx/modules.
my $prefix = "$tmp/p";
mkdir $prefix;
mkdir "$prefix/$_" for qw(conf logs modules);

symlink "$root/usr/lib/nginx/modules/ngx_http_rlm_module.so",
        "$prefix/modules/ngx_http_rlm_module.so";
symlink "$mods/$_", "$prefix/modules/$_"
    for qw(ndk_http_module.so ngx_http_lua_module.so);

sub free_port {
    my $s = IO::Socket::INET->new(Listen => 1, LocalAddr => '127.0.0.1',
                                  LocalPort => 0, ReuseAddr => 1)
        or die "no free port: $!";
    return $s->sockport;
}

my ($port, $demo) = (free_port(), free_port());

my $avail = '/usr/share/nginx/modules-available';

write_file("$prefix/conf/nginx.conf", <<"EOF");
include $avail/mod-http-ndk.conf;
include $avail/mod-http-lua.conf;
include $root$avail/mod-http-rlm.conf;

daemon on;
master_process on;
worker_processes 1;
pid logs/nginx.pid;
error_log logs/error.log notice;

events { worker_connections 64; }

http {
    access_log off;
    client_body_temp_path body;

    # the installed Lua library, where /usr/share/lua/5.1 would be
    lua_package_path "$root/usr/share/lua/5.1/?.lua;;";
    init_by_lua_block { require("rlm.policy") require("resty.rlm") }

    rlm_sandboxd      $root/usr/lib/ngx_rlm/rlm-sandboxd;
    rlm_runtime_dir   $tmp/rt;
    rlm_pool_size     1;
    rlm_provider demo url=http://127.0.0.1:$demo/v1 model=rlm-demo;

    server {
        listen 127.0.0.1:$port;
        location /v1/sessions { rlm_sessions_api; }
        location = /v1/chat/completions { rlm_completions; }
        location = /healthz { rlm_health; }
    }

    server {
        listen 127.0.0.1:$demo;
        location = /v1/chat/completions {
            content_by_lua_block { require("rlm.demo_upstream").serve() }
        }
    }
}
EOF

$out = `'$nginx' -t -p '$prefix' -c conf/nginx.conf -e logs/error.log 2>&1`;
is($?, 0, 'nginx -t passes with the installed snippet, module and Lua')
    or diag($out, slurp("$prefix/logs/error.log"));

if ($> != 0) {
    diag('not root: the installed manager cannot make its jails; '
         . 'serving not tried');
    done_testing();
    exit 0;
}

is(system($nginx, '-p', $prefix, '-c', 'conf/nginx.conf',
          '-e', 'logs/error.log'), 0, 'that nginx starts');

my $pid;

END {
    # the nginx this test started, by its pid; it stops its manager
    kill 'QUIT', $pid if $pid;
}

$pid = slurp("$prefix/logs/nginx.pid");
chomp $pid if defined $pid;
$pid = undef unless $pid && $pid =~ /^\d+$/;

my $http = HTTP::Tiny->new(timeout => 30);
my $base = "http://127.0.0.1:$port";

# the manager takes a moment to start: wait for health, bounded by count
my $health;
for (1 .. 300) {
    $health = $http->get("$base/healthz");
    last if $health->{status} == 200;
    select undef, undef, undef, 0.1;
}
is($health->{status}, 200, 'the installed rlm-sandboxd answers')
    or diag($health->{content}, slurp("$prefix/logs/error.log"));

my $r = $http->post("$base/v1/sessions");
my ($sid) = ($r->{content} // '') =~ /"id"\s*:\s*"([^"]+)"/;
ok($sid, 'a session opens') or diag($r->{status}, $r->{content});

$r = $http->post("$base/v1/sessions/$sid/eval",
                 { headers => { 'Content-Type' => 'application/json' },
                   content => '{"code":"x = 6 * 7\nprint(x)"}' });
like($r->{content}, qr/"status"\s*:\s*"ok".*42/s,
     'an eval cell runs in an installed sandbox')
    or diag($r->{status}, $r->{content});

my $context = join "\n", map { "Line $_: nothing here." } 1 .. 300;
$context =~ s/Line 123: nothing here\./Line 123: the code word is tangerine./;
$context =~ s/\n/\\n/g;

$r = $http->post("$base/v1/chat/completions",
                 { headers => { 'Content-Type' => 'application/json' },
                   content => '{"model":"rlm-demo","messages":[{"role":'
                              . '"user","content":"What is the code word?"}],'
                              . '"context":"' . $context . '",'
                              . '"rlm":{"sub_model":"rlm-demo"}}' });
is($r->{status}, 200, 'a completion of the demo model')
    or diag($r->{content});
like($r->{content}, qr/the code word is tangerine/,
     'the demo model found the line through the installed loop');

# The manager as the installed systemd unit runs it, and nginx connecting
# to it: the unit's ExecStart as it is, but for DESTDIR before the binary
# and a runtime directory of this test's.  Its sockets belong to www-data,
# so nginx's workers run as www-data.
kill 'QUIT', $pid;
for (1 .. 300) {
    last unless kill 0, $pid;
    select undef, undef, undef, 0.1;
}
ok(!kill(0, $pid), 'the first nginx stopped');
$pid = undef;

SKIP: {
    skip 'no www-data user for the unit\'s --socket-owner', 3
        unless getpwnam('www-data');

    my $unit = slurp("$root/lib/systemd/system/rlm-sandboxd.service");
    $unit =~ s/\\\n//g;
    my ($exec) = $unit =~ /^ExecStart=(.*)$/m;
    my @argv = split ' ', $exec;
    $argv[0] = "$root$argv[0]";

    my $ext;
    for my $i (0 .. $#argv - 1) {
        if ($argv[$i] eq '--runtime-dir') {
            $ext = $argv[$i + 1] = "$tmp/ext";
        }
    }
    ok($ext, 'the unit sets --runtime-dir') or diag($exec);

    my $manager = fork // die "fork: $!";
    if ($manager == 0) {
        open STDOUT, '>', "$prefix/logs/ext.log";
        open STDERR, '>&', \*STDOUT;
        exec @argv or exit 2;
    }

    END { kill 'TERM', $manager if $manager; }

    for (1 .. 300) {
        last if -S "$tmp/ext/control.sock";
        select undef, undef, undef, 0.1;
    }

    my $conf = slurp("$prefix/conf/nginx.conf");
    $conf =~ s/^\s*rlm_sandboxd\s.*\n//m;
    $conf =~ s/^\s*rlm_runtime_dir\s.*\n//m;
    $conf =~ s/^(\s*)rlm_pool_size\s.*\n/$1rlm_sandboxd_socket $tmp\/ext\/control.sock;\n/m;
    $conf = "user www-data;\n$conf";
    write_file("$prefix/conf/nginx.conf", $conf);

    system($nginx, '-p', $prefix, '-c', 'conf/nginx.conf',
           '-e', 'logs/error.log');
    $pid = slurp("$prefix/logs/nginx.pid");
    chomp $pid if defined $pid;
    $pid = undef unless $pid && $pid =~ /^\d+$/;

    for (1 .. 300) {
        $health = $http->get("$base/healthz");
        last if $health->{status} == 200;
        select undef, undef, undef, 0.1;
    }

    $r = $http->post("$base/v1/sessions");
    ($sid) = ($r->{content} // '') =~ /"id"\s*:\s*"([^"]+)"/;
    $r = $http->post("$base/v1/sessions/" . ($sid // 'none') . "/eval",
                     { headers => { 'Content-Type' => 'application/json' },
                       content => '{"code":"print(6 * 7)"}' });
    like($r->{content}, qr/"status"\s*:\s*"ok".*42/s,
         'an eval cell runs in a sandbox of the unit\'s manager, reached '
         . 'through rlm_sandboxd_socket by nginx\'s www-data workers')
        or diag($health->{content}, $r->{content},
                slurp("$prefix/logs/ext.log"),
                slurp("$prefix/logs/error.log"));

    ok(kill(0, $manager), 'the unit\'s manager is up');
}

done_testing();
