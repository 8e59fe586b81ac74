package RlmLoop;

# Shared setup of the completion suites (t/rlm_*.t), on top of RlmApi
# (a real rlm-sandboxd and the sessions API):
#
#     use lib 't/api_lib'; use lib 't/loop_lib';
#     use RlmTest 'no_plan';
#     use RlmLoop;
#
# Every block gets the scripted model (t/lib/mock_llm.lua) at
# /mock/v1/chat/completions, /mock/script and /mock/requests, a provider
# "mock" pointing at it, and POST /v1/chat/completions (rlm_completions)
# unless its config has a "# no completions location" line.  Lua drivers
# use t/loop_lib/loopt.lua.

use strict;
use warnings;

use Cwd qw( abs_path );
use File::Basename qw( dirname );

use RlmApi;

my $Root = abs_path(dirname(__FILE__) . '/../..');

Test::Nginx::Util::add_block_preprocessor(sub {
    my $block = shift;
    my $http = $block->http_config // '';
    my $config = $block->config // '';

    my $pre = '';

    if ($http !~ /\blua_package_path\b/) {
        $pre .= qq{    lua_package_path "$Root/lua/?.lua;$Root/t/lib/?.lua;}
                . qq{$Root/t/api_lib/?.lua;$Root/t/loop_lib/?.lua;;";\n};
    }

    $pre .= "    lua_shared_dict mock_llm 8m;\n";

    if ($http !~ /\brlm_provider\b/) {
        $pre .= '    rlm_provider mock '
                . 'url=http://127.0.0.1:$TEST_NGINX_SERVER_PORT/mock/v1 '
                . "model=script:root retries=0 timeout=10s;\n";
    }

    $block->set_value('http_config', $pre . $http);

    my $locations = <<'CONF';
    location = /mock/v1/chat/completions {
        content_by_lua_block { require("mock_llm").serve() }
    }
    location = /mock/script {
        content_by_lua_block { require("mock_llm").script() }
    }
    location = /mock/requests {
        content_by_lua_block { require("mock_llm").requests() }
    }
CONF

    if ($config !~ /#\s*no completions location/) {
        $locations .= "    location = /v1/chat/completions "
                      . "{ rlm_completions; }\n";
    }

    $block->set_value('config', $locations . $config);
});

1;
