package RlmTest;

# Common base for the ngx_rlm suites:
#
#     use RlmTest 'no_plan';      # prove -I t/lib -I t ...
#
# On top of Test::Nginx::Socket::Lua it
#   - defaults TEST_NGINX_BINARY to /usr/sbin/nginx and
#     TEST_NGINX_LOAD_MODULES to Debian's ndk + lua modules and the
#     module built in <repo>/build (each only if the file exists);
#   - sets TEST_NGINX_RLM_ROOT to the repository root, so configs can say
#     $TEST_NGINX_RLM_ROOT/lua/...;
#   - adds lua_package_path "<repo>/lua/?.lua;<repo>/t/lib/?.lua;;" to
#     every block's http_config (unless the block sets one itself);
#   - gives every block a "--- no_error_log" of [error], [alert] and
#     [emerg] unless it has its own error_log/no_error_log or must_die.
#
# It works the same over the CPAN Test::Nginx (drop -I t/lib).

use strict;
use warnings;

use Cwd qw( abs_path );
use File::Basename qw( dirname );

our $Root;

BEGIN {
    $Root = abs_path(dirname(__FILE__) . '/..');

    $ENV{TEST_NGINX_BINARY} ||= '/usr/sbin/nginx';
    $ENV{TEST_NGINX_RLM_ROOT} ||= $Root;

    if (!defined $ENV{TEST_NGINX_LOAD_MODULES}) {
        my $mods = '/usr/lib/nginx/modules';
        $ENV{TEST_NGINX_LOAD_MODULES} = join ' ', grep { -f $_ } (
            "$mods/ndk_http_module.so",
            "$mods/ngx_http_lua_module.so",
            "$Root/build/ngx_http_rlm_module.so",
        );
    }
}

use Test::Nginx::Socket::Lua -base;

our @DefaultNoErrorLog = ('[error]', '[alert]', '[emerg]');

# Is the lua module there (loaded dynamically or compiled in)?
my $have;

sub have_lua () {
    return $have if defined $have;

    my $mods = $ENV{TEST_NGINX_LOAD_MODULES} // '';
    if ($mods =~ /ngx_http_lua_module/) {
        return $have = 1;
    }

    my $bin = $ENV{TEST_NGINX_BINARY};
    my $v = `$bin -V 2>&1` // '';
    return $have = ($v =~ /lua/ ? 1 : 0);
}

add_block_preprocessor(sub {
    my $block = shift;

    if (have_lua()) {
        my $http = $block->http_config // '';
        if ($http !~ /\blua_package_path\b/) {
            $block->set_value('http_config',
                qq{    lua_package_path "$Root/lua/?.lua;$Root/t/lib/?.lua;;";\n}
                . $http);
        }
    }

    if (!defined $block->error_log && !defined $block->no_error_log
        && !defined $block->must_die)
    {
        $block->set_value('no_error_log', join("\n", @DefaultNoErrorLog)
                                          . "\n");
    }
});

1;
