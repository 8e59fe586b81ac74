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

done_testing();
