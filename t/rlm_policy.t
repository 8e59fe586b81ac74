# The Lua policy (conf/policy.conf, lua/rlm/policy.lua) in front of the
# real completions handler: keys -> tenants own their completion
# sessions, routes pick the provider and the root and sub models the
# provider sees, route limits reach the loop.

use FindBin;
use lib "$FindBin::Bin/api_lib";
use lib "$FindBin::Bin/loop_lib";
use RlmTest 'no_plan';
use RlmLoop;

our $Root = $RlmTest::Root;

add_block_preprocessor(sub {
    my $block = shift;
    my $http = $block->http_config // '';
    $block->set_value('http_config', <<"_EOC_" . $http);
    include $Root/conf/policy.conf;
    init_by_lua_block {
        require("rlm.policy").configure{
            keys_file = "$Root/t/servroot_keys",
            routes_file = "$Root/t/servroot_routes.json",
        }
    }
_EOC_
    $block->set_value('config',
        qq{    include $Root/conf/policy-server.conf;\n}
        . ($block->config // ''));
});

# the keys and routes files are written by the test before nginx starts
open my $k, '>', "$Root/t/servroot_keys" or die $!;
print $k "sk-tenant-a-0001 alpha\nsk-tenant-b-0002 beta\n";
close $k;

open my $r, '>', "$Root/t/servroot_routes.json" or die $!;
print $r <<'JSON';
{"models": {
  "smart": {"provider": "mock", "root_model": "script:root",
            "sub_model": "script:sub", "aliases": ["s"],
            "max_iterations": 3, "max_depth": 1, "timeout": 60}
}}
JSON
close $r;

no_shuffle();
run_tests();

unlink "$Root/t/servroot_keys", "$Root/t/servroot_routes.json";

__DATA__

=== TEST 1: an alias routes to the root and sub models; the route caps iterations
--- config
    # no completions location
    location = /v1/chat/completions {
        access_by_lua_block { require("rlm.policy").access() }
        rlm_session_owner        $rlm_tenant;
        rlm_completion_provider  $rlm_provider;
        rlm_completion_model     $rlm_root_model;
        rlm_completion_sub_model $rlm_sub_model;
        rlm_completions;
    }
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = l.repl("r = llm_query('hi')", "print(r)") },
            })
            l.script("sub", { { content = "sub says hi" } })
            local res = l.complete({ model = "s",
                messages = { { role = "user", content = "go" } },
                context = "x", rlm = { max_iterations = 50 } },
                { Authorization = "Bearer sk-tenant-a-0001" })
            local j = res.json
            ngx.say(res.status, " ", j.model, " ", j.choices[1].finish_reason,
                    " ", j.rlm.limit, " iterations ", j.rlm.iterations)
            local seen = {}
            for _, q in ipairs(l.requests()) do
                seen[#seen + 1] = q.model
            end
            ngx.say(table.concat(seen, " "))
        }
    }
--- request
GET /t
--- response_body
200 s length max_iterations iterations 4
script:root script:sub script:root script:sub script:root script:sub script:root



=== TEST 2: no key: 401; a tenant's completion session is not another tenant's
--- config
    # no completions location
    location = /v1/chat/completions {
        access_by_lua_block { require("rlm.policy").access() }
        rlm_session_owner        $rlm_tenant;
        rlm_completion_provider  $rlm_provider;
        rlm_completion_model     $rlm_root_model;
        rlm_completion_sub_model $rlm_sub_model;
        rlm_completions;
    }
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", { { content = "FINAL(done)" } })
            local body = { model = "smart", context = "x",
                messages = { { role = "user", content = "go" } } }
            local res = l.complete(body)
            ngx.say("anonymous: ", l.envelope(res))
            res = l.complete(body, { Authorization = "Bearer sk-tenant-a-0001" })
            local id = res.headers["x-rlm-session-id"]
            ngx.say("alpha: ", res.status, " ", l.answer(res))
            res = l.complete(body, { Authorization = "Bearer sk-tenant-b-0002",
                                     ["X-RLM-Session-Id"] = id })
            ngx.say("beta in alpha's session: ", l.envelope(res))
            res = l.complete(body, { Authorization = "Bearer sk-tenant-a-0001",
                                     ["X-RLM-Session-Id"] = id })
            ngx.say("alpha again: ", res.status, " turn ", res.json.rlm.turn)
        }
    }
--- request
GET /t
--- response_body
anonymous: 401 invalid_api_key invalid_request_error
alpha: 200 done
beta in alpha's session: 404 session_not_found invalid_request_error
alpha again: 200 turn 1



=== TEST 3: a large context passes the policy without being decoded in Lua, and arrives intact
--- config
    # no completions location
    location = /v1/chat/completions {
        client_body_buffer_size 64k;
        access_by_lua_block { require("rlm.policy").access() }
        rlm_session_owner        $rlm_tenant;
        rlm_completion_provider  $rlm_provider;
        rlm_completion_model     $rlm_root_model;
        rlm_completion_sub_model $rlm_sub_model;
        rlm_completions;
    }
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local cjson = require "cjson"
            local parts = {}
            for i = 1, 60000 do
                parts[i] = 'row ' .. i .. ' "quoted" \\ é'
            end
            local ctx = table.concat(parts, "\n")
            l.script("root", {
                { content = l.repl(
                    "import hashlib",
                    "answer.update(content=hashlib.md5("
                    .. "context.encode('utf-8')).hexdigest(), ready=True)") },
            })
            local body = cjson.encode({ model = "smart", context = ctx,
                max_completion_tokens = 100000,
                messages = { { role = "user", content = "go" } } })
            local res = l.complete(body,
                                   { Authorization = "Bearer sk-tenant-a-0001" })
            ngx.say(res.status, " ", l.answer(res) == ngx.md5(ctx), " ",
                    #body > 1024 * 1024)
        }
    }
--- request
GET /t
--- response_body
200 true true



=== TEST 4: a large list context passes the policy undecoded and arrives intact
--- config
    # no completions location
    location = /v1/chat/completions {
        client_body_buffer_size 64k;
        access_by_lua_block { require("rlm.policy").access() }
        rlm_session_owner        $rlm_tenant;
        rlm_completion_provider  $rlm_provider;
        rlm_completion_model     $rlm_root_model;
        rlm_completion_sub_model $rlm_sub_model;
        rlm_completions;
    }
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local cjson = require "cjson"
            local items = {}
            for i = 1, 40000 do
                items[i] = { n = i, text = 'row "' .. i .. '" é' }
            end
            l.script("root", {
                { content = l.repl(
                    "answer.update(content=str(len(context)) + ' '"
                    .. " + context[41]['text'], ready=True)") },
            })
            local body = cjson.encode({ model = "smart", context = items,
                messages = { { role = "user", content = "go" } } })
            local res = l.complete(body,
                                   { Authorization = "Bearer sk-tenant-a-0001" })
            ngx.say(res.status, " ", l.answer(res), " ", #body > 1024 * 1024)
        }
    }
--- request
GET /t
--- response_body
200 40000 row "42" é true
