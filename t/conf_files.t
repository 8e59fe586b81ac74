# Every nginx configuration shipped in conf/ must pass `nginx -t` with the
# module built here, prepared exactly as `make run` prepares it.

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(dirname basename);
use File::Temp qw(tempdir);
use Test::More;

my $top = abs_path(dirname(__FILE__) . '/..');
my $nginx = $ENV{TEST_NGINX_BINARY} || '/usr/sbin/nginx';
my $build = $ENV{RLM_BUILD} || "$top/build";

plan skip_all => "module not built ($build/ngx_http_rlm_module.so)"
    unless -f "$build/ngx_http_rlm_module.so";
# nginx -t checks that rlm_sandboxd names an executable
plan skip_all => "rlm-sandboxd not built ($build/bin/rlm-sandboxd)"
    unless -x "$build/bin/rlm-sandboxd";

my $run = tempdir('rlm-conf-XXXXXX', TMPDIR => 1, CLEANUP => 1);

# what make run serves without any of its settings from the environment
delete @ENV{qw( RLM_UPSTREAM_URL RLM_API_KEY RLM_MODEL RLM_SUB_MODEL
                RLM_KEYS_FILE RLM_ROUTES_FILE RLM_LISTEN RLM_CONF_D
                RLM_NODE_ID RLM_NODES )};

system('make', '-s', '-C', $top, "BUILD=$build", "RUN_DIR=$run",
       'PORT=19801', 'run-prefix') == 0
    or BAIL_OUT('make run-prefix failed');

my @confs = sort glob("$top/conf/*.conf");
ok(scalar(grep { basename($_) eq 'rlm.conf' } @confs),
   'conf/rlm.conf exists');

# A file with an events block is a whole configuration; any other file is
# a snippet, and must be included by one of them so that it is checked too.
my (@whole, @snippets);
for my $conf (@confs) {
    my $text = do { local (@ARGV, $/) = ($conf); <> };
    if ($text =~ /^\s*events\s*\{/m) {
        push @whole, [basename($conf), $text];
    } else {
        push @snippets, basename($conf);
    }
}

for my $w (@whole) {
    my $name = $w->[0];
    my $out = `$nginx -t -p $run -c conf/$name -e stderr 2>&1`;
    is($?, 0, "nginx -t accepts conf/$name") or diag($out);
    like($out, qr/test is successful/, "conf/$name: test is successful");
}

for my $snippet (@snippets) {
    ok(scalar(grep { $_->[1] =~ /^\s*include\s+\Q$snippet\E\s*;/m } @whole),
       "conf/$snippet is included by a whole configuration");
}

# the port make run was asked for really is the one it listens on
# (make run writes the listen line: loopback unless RLM_KEYS_FILE is set)
my $text = do { local (@ARGV, $/) = ("$run/conf/rlm.conf"); <> };
my $listen = do { local (@ARGV, $/) = ("$run/conf/listen.conf"); <> };
like($text, qr/^\s*include\s+listen\.conf;/m, 'rlm.conf takes listen.conf');
like($listen, qr/^listen\s+127\.0\.0\.1:19801;$/m,
     'PORT substituted in listen.conf, loopback only');
unlike($text, qr/\@(TOP|BUILD|RUN)\@/, 'no placeholder left unexpanded');

# conf/ is included as it is (make run copies it unchanged and writes
# what depends on the checkout and the port into files of its own), so
# an operator can include any snippet of it without editing it
for my $conf (@confs) {
    my $name = basename($conf);
    my $shipped = do { local (@ARGV, $/) = ($conf); <> };
    unlike($shipped, qr/\@[A-Z_]+\@/, "conf/$name has no placeholder");
    my $copy = do { local (@ARGV, $/) = ("$run/conf/$name"); <> };
    ok(defined $copy && $copy eq $shipped,
       "make run uses conf/$name unchanged");
}

# a provider key from make run's environment reaches rlm_provider's
# key_env through the "env RLM_API_KEY;" of rlm.conf
{
    local %ENV = %ENV;
    $ENV{RLM_UPSTREAM_URL} = 'http://127.0.0.1:9/v1';
    $ENV{RLM_API_KEY} = 'sk-conf-files-test';
    my $keyed = tempdir('rlm-conf-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    system('make', '-s', '-C', $top, "BUILD=$build", "RUN_DIR=$keyed",
           'PORT=19803', 'run-prefix') == 0
        or BAIL_OUT('make run-prefix failed');
    like(do { local (@ARGV, $/) = ("$keyed/conf/provider.conf"); <> },
         qr/key_env=RLM_API_KEY/, 'provider.conf reads RLM_API_KEY');
    my $out = `$nginx -t -p $keyed -c conf/rlm.conf -e stderr 2>&1`;
    is($?, 0, 'nginx -t accepts make run with RLM_API_KEY') or diag($out);
}

# the snippets in an operator's configuration that has its own
# http-level log_by_lua_block and client_body_buffer_size
my $load = do { local (@ARGV, $/) = ("$run/conf/modules.conf"); <> };
open my $fh, '>', "$run/conf/operator.conf" or die "$run: $!\n";
print $fh <<"CONF";
$load
pid logs/operator.pid;
events { }
http {
    lua_package_path "$top/lua/?.lua;;";
    client_body_buffer_size 8k;
    log_by_lua_block { ngx.log(ngx.INFO, "the operator's log phase") }

    include $top/conf/policy.conf;
    include $top/conf/log-json.conf;
    include $top/conf/cluster.conf;

    server {
        listen 127.0.0.1:19802;
        include $top/conf/policy-server.conf;
        include $top/conf/cluster-forward.conf;
        include $top/conf/lua-example.conf;
    }
}
CONF
close $fh;
my $out = `$nginx -t -p $run -c conf/operator.conf -e stderr 2>&1`;
is($?, 0, 'nginx -t accepts the snippets in an operator\'s configuration')
    or diag($out);
like($out, qr/test is successful/, 'operator.conf: test is successful');

done_testing();
