# The snippets of conf/ included as they are into an operator's own
# configuration, one that already has an http-level log_by_lua_block and
# client_body_buffer_size: nginx accepts it (a second http-level one of
# either is "duplicate"), the policy still gives back its slots in the
# server that includes conf/policy-server.conf, and the operator's own
# log phase and buffer size still hold in their other server.

use FindBin;
use RlmTest 'no_plan';

our $Root = $RlmTest::Root;

no_shuffle();
timeout(30);

run_tests();

__DATA__

=== TEST 1: http-level snippets beside the operator's log_by_lua_block and client_body_buffer_size
--- http_config
    lua_package_path "$TEST_NGINX_RLM_ROOT/lua/?.lua;$TEST_NGINX_RLM_ROOT/t/api_lib/?.lua;;";

    # the operator's own, for the whole http block
    client_body_buffer_size 8k;
    lua_shared_dict operator 1m;
    log_by_lua_block { ngx.shared.operator:incr("logged", 1, 0) }

    include $TEST_NGINX_RLM_ROOT/conf/policy.conf;
    include $TEST_NGINX_RLM_ROOT/conf/log-json.conf;
    include $TEST_NGINX_RLM_ROOT/conf/cluster.conf;

    # the operator's other server: nothing of ngx_rlm in it
    server {
        listen unix:$TEST_NGINX_SERVER_ROOT/logs/operator.sock;
        location = /echo {
            content_by_lua_block {
                ngx.req.read_body()
                ngx.say("operator in file: ", ngx.req.get_body_file() ~= nil)
            }
        }
    }
--- user_files
>>> keys.txt
sk-solo-000000000001   solo    concurrency=1
--- config
    include $TEST_NGINX_RLM_ROOT/conf/policy-server.conf;
    include $TEST_NGINX_RLM_ROOT/conf/cluster-forward.conf;
    include $TEST_NGINX_RLM_ROOT/conf/lua-example.conf;

    set $rlm_keys_file $TEST_NGINX_SERVER_ROOT/html/keys.txt;

    # a stand-in for rlm_completions behind the policy
    location = /v1/chat/completions {
        access_by_lua_block { require("rlm.policy").access() }
        content_by_lua_block {
            ngx.req.read_body()
            ngx.say("tenant ", ngx.var.rlm_tenant, " in file: ",
                    ngx.req.get_body_file() ~= nil)
        }
    }

    location = /t {
        content_by_lua_block {
            local rlmt = require "rlmt"
            local cjson = require "cjson.safe"

            -- 20 kB: over the operator's 8k, under policy-server.conf's 1m
            local body = cjson.encode{
                model = "m",
                messages = { { role = "user",
                               content = string.rep("x", 20000) } },
            }
            local key = { Authorization = "Bearer sk-solo-000000000001" }

            -- the policy's log phase gives the slot back (concurrency=1);
            -- the client may see the end of the answer before that phase
            -- has run, so wait for it (at most 5 s): without the log
            -- phase the slot stays held and the second request is 429
            local function released()
                for _ = 1, 100 do
                    if ngx.shared.rlm_policy:get("running:solo") == nil then
                        return "released"
                    end
                    ngx.sleep(0.05)
                end
                return "still held"
            end

            for i = 1, 2 do
                local r = assert(rlmt.http("POST", "/v1/chat/completions",
                                           body, key))
                ngx.print("policy ", i, ": ", r.status, " ", r.body)
                ngx.say("slot ", released())
            end

            local sock = ngx.socket.tcp()
            assert(sock:connect("unix:" .. ngx.var.rlm_t_root
                                .. "/logs/operator.sock"))
            assert(sock:send("POST /echo HTTP/1.0\r\nHost: op\r\n"
                             .. "Content-Length: " .. #body .. "\r\n\r\n"
                             .. body))
            local raw = assert(sock:receive("*a"))
            sock:close()
            ngx.print(raw:match("\r\n\r\n(.*)$"))

            -- the operator's log phase ran there, and only there: this
            -- server's locations run the policy's
            -- (waited for as above, at most 5 s)
            for _ = 1, 100 do
                if ngx.shared.operator:get("logged") then
                    break
                end
                ngx.sleep(0.05)
            end
            ngx.say("operator logged: ",
                    tostring(ngx.shared.operator:get("logged")))
        }
    }
    set $rlm_t_root $TEST_NGINX_SERVER_ROOT;
--- request
GET /t
--- response_body
policy 1: 200 tenant solo in file: false
slot released
policy 2: 200 tenant solo in file: false
slot released
operator in file: true
operator logged: 1
--- no_error_log
[error]
[emerg]
