package Boundary;

# Shared setup of the trust-boundary suites (t/boundary_*.t), on top of
# RlmLoop (real rlm-sandboxd, the sessions API, the scripted model):
#
#     use lib 't/api_lib'; use lib 't/loop_lib'; use lib 't/boundary_lib';
#     use RlmTest 'no_plan';
#     use Boundary;
#
# Every block also gets t/boundary_lib/ on the lua_package_path and the
# provider "mock" pointing at /gate/v1, a gate in front of the scripted
# model (boundary.lua): a driver can hold chosen model requests there
# (children of a fan-out, say) until it has looked at the server, and
# let them go.  A block with its own rlm_provider keeps it.  The
# sandboxes' runtime dir is <server root>/rlm_temp, so that the suites
# also run under the CPAN Test::Nginx.

use strict;
use warnings;

use Cwd qw( abs_path );
use File::Basename qw( dirname );

# RlmLoop (and RlmApi) first: preprocessors added later run first, so
# ours sees the block before theirs and theirs leave our settings alone
use RlmLoop;

my $Root = abs_path(dirname(__FILE__) . '/../..');

Test::Nginx::Util::add_block_preprocessor(sub {
    my $block = shift;
    my $http = $block->http_config // '';
    my $config = $block->config // '';

    my $pre = '';

    if ($http !~ /\blua_package_path\b/) {
        $pre .= qq{    lua_package_path "$Root/lua/?.lua;$Root/t/lib/?.lua;}
                . qq{$Root/t/api_lib/?.lua;$Root/t/loop_lib/?.lua;}
                . qq{$Root/t/boundary_lib/?.lua;;";\n};
    }

    # a name the CPAN Test::Nginx removes between blocks (*_temp): it
    # only removes what it knows and then bails out on a non-empty
    # server root (our runner wipes the whole root anyway)
    if ($http !~ /\brlm_runtime_dir\b/) {
        $pre .= '    rlm_runtime_dir $TEST_NGINX_SERVER_ROOT/rlm_temp;' . "\n";
    }

    if ($http !~ /\brlm_provider\b/) {
        $pre .= '    rlm_provider mock '
                . 'url=http://127.0.0.1:$TEST_NGINX_SERVER_PORT/gate/v1 '
                . "model=script:root retries=0 timeout=60s;\n";
    }

    # valgrind's own memory counts in a worker's resident set: the
    # memory bounds of the suites are this many times wider under it
    if ($http !~ /\$boundary_mem_scale\b/) {
        $pre .= '    map $pid $boundary_mem_scale { default '
                . ($ENV{TEST_NGINX_USE_VALGRIND} ? 8 : 1) . "; }\n";
    }

    $block->set_value('http_config', $pre . $http);

    $block->set_value('config', <<'CONF' . $config);
    location = /gate/v1/chat/completions {
        client_body_buffer_size 1m;
        content_by_lua_block { require("boundary").gate_serve() }
    }
CONF
});

1;
