# The curl multi on the event loop: many concurrent calls on one worker,
# the per-provider concurrency cap, client aborts cancelling calls, and a
# clean worker exit.

use RlmTest 'no_plan';

add_block_preprocessor(sub {
    my $block = shift;

    my $http = $block->http_config // '';
    $block->set_value('http_config', <<'_EOC_' . $http);
    lua_shared_dict mock_llm 8m;
    rlm_provider mock url=http://127.0.0.1:$TEST_NGINX_SERVER_PORT/v1
                 model=mock-model retries=0 timeout=10s;
    rlm_provider capped url=http://127.0.0.1:$TEST_NGINX_SERVER_PORT/v1
                 model=mock-model retries=0 timeout=10s max_concurrent=8;
_EOC_

    my $config = $block->config // '';
    $block->set_value('config', <<'_EOC_' . $config);
    location = /v1/chat/completions {
        content_by_lua_block { require("mock_llm").serve() }
    }
    location = /chat { rlm_chat_passthrough mock; }
    location = /capped { rlm_chat_passthrough capped; }
    location = /status { rlm_llm_status; }
    location = /many {
        lua_check_client_abort on;
        content_by_lua_block {
            local cjson = require "cjson.safe"
            local mock = require "mock_llm"
            local n = tonumber(ngx.var.arg_n)
            if ngx.var.arg_group then
                -- subrequests inherit it: one group for all n calls
                ngx.req.set_header("X-RLM-Group-Cap", ngx.var.arg_group)
            end
            local reqs = {}
            for i = 1, n do
                reqs[i] = { ngx.var.arg_uri, { method = ngx.HTTP_POST,
                    body = cjson.encode({
                        messages = { { role = "user", content = "q" .. i } },
                        mock = { latency = tonumber(ngx.var.arg_latency),
                                 barrier = tonumber(ngx.var.arg_barrier),
                                 content = "answer " .. i } }) } }
            end
            local res = { ngx.location.capture_multi(reqs) }
            local ok = 0
            for i, r in ipairs(res) do
                local j = cjson.decode(r.body)
                if r.status == 200
                   and j.choices[1].message.content == "answer " .. i
                then
                    ok = ok + 1
                end
            end
            local st = require("llm_driver").status()
            ngx.say("ok=", ok, "/", n, " provider_saw=", #mock.recorded(),
                    " max_in_flight=", mock.max_inflight())
            ngx.say("active=", st.curl.active, " sockets=", st.curl.sockets,
                    " completed=", st.curl.completed)
        }
    }
_EOC_
});

no_shuffle();
worker_connections(1024);
run_tests();

__DATA__

=== TEST 1: 64 concurrent calls on one worker: all in flight at once, all complete
--- request
GET /many?n=64&barrier=64&uri=/chat
--- timeout: 20
--- response_body
ok=64/64 provider_saw=64 max_in_flight=64
active=0 sockets=0 completed=64
--- no_shutdown_error_log
[alert]
open socket



=== TEST 2: max_concurrent=8: 32 calls complete, never more than 8 at the provider
--- request
GET /many?n=32&barrier=8&latency=0.05&uri=/capped
--- timeout: 20
--- response_body
ok=32/32 provider_saw=32 max_in_flight=8
active=0 sockets=0 completed=32



=== TEST 3: a client that goes away cancels its call; later calls work
--- config
    location = /abort {
        content_by_lua_block {
            local d = require "llm_driver"
            local sock = ngx.socket.tcp()
            assert(sock:connect("127.0.0.1", ngx.var.server_port))
            local body = '{"mock":{"latency":1},"messages":'
                         .. '[{"role":"user","content":"slow"}]}'
            assert(sock:send("POST /chat HTTP/1.1\r\nHost: x\r\n"
                             .. "Content-Length: " .. #body .. "\r\n\r\n"
                             .. body))
            ngx.sleep(0.3)
            local st = d.status()
            ngx.say("before: active=", st.curl.active)
            sock:close()
            ngx.sleep(0.3)
            st = d.status()
            ngx.say("after: active=", st.curl.active, " sockets=",
                    st.curl.sockets, " cancelled=", st.curl.cancelled,
                    " completed=", st.curl.completed)
            local res = d.chat("/chat", d.user("again"))
            ngx.say("next call: ", res.status, " ", d.content(res))
        }
    }
--- request
GET /abort
--- timeout: 10
--- response_body
before: active=1
after: active=0 sockets=0 cancelled=1 completed=0
next call: 200 echo: again
--- error_log
client prematurely closed connection
--- no_error_log
[error]
[alert]
[crit]



=== TEST 4: a call queued behind the cap is cancelled cleanly too
--- http_config
    rlm_provider one url=http://127.0.0.1:$TEST_NGINX_SERVER_PORT/v1
                 model=m retries=0 max_concurrent=1;
--- config
    location = /one { rlm_chat_passthrough one; }
    location = /abort2 {
        content_by_lua_block {
            local d = require "llm_driver"
            local body = '{"mock":{"latency":0.6},"messages":'
                         .. '[{"role":"user","content":"slow"}]}'
            local socks = {}
            for i = 1, 2 do
                local sock = ngx.socket.tcp()
                assert(sock:connect("127.0.0.1", ngx.var.server_port))
                assert(sock:send("POST /one HTTP/1.1\r\nHost: x\r\n"
                                 .. "Content-Length: " .. #body
                                 .. "\r\n\r\n" .. body))
                socks[i] = sock
            end
            ngx.sleep(0.2)
            local st = d.status()
            local p
            for _, x in ipairs(st.providers) do
                if x.name == "one" then p = x end
            end
            ngx.say("active=", p.active, " waiting=", p.waiting)
            socks[2]:close()
            ngx.sleep(0.2)
            st = d.status()
            for _, x in ipairs(st.providers) do
                if x.name == "one" then p = x end
            end
            ngx.say("after abort: active=", p.active, " waiting=", p.waiting)
            socks[1]:settimeout(3000)
            local line = socks[1]:receive("*l")
            ngx.say("first: ", line)
            socks[1]:close()
        }
    }
--- request
GET /abort2
--- timeout: 10
--- response_body
active=1 waiting=1
after abort: active=1 waiting=0
first: HTTP/1.1 200 OK
--- error_log
client prematurely closed connection
--- no_error_log
[error]
[alert]



=== TEST 5: a streaming client that goes away mid-stream cancels the call
--- config
    location = /abort3 {
        content_by_lua_block {
            local d = require "llm_driver"
            local sock = ngx.socket.tcp()
            assert(sock:connect("127.0.0.1", ngx.var.server_port))
            local body = '{"stream":true,"mock":{"chunks":["a","b","c"],'
                         .. '"chunk_delay":0.4},"messages":'
                         .. '[{"role":"user","content":"slow stream"}]}'
            assert(sock:send("POST /chat HTTP/1.1\r\nHost: x\r\n"
                             .. "Content-Length: " .. #body .. "\r\n\r\n"
                             .. body))
            sock:settimeout(3000)
            local status = sock:receive("*l")
            local got
            repeat
                local line = sock:receive("*l")
                if line and line:find('"content":"a"', 1, true) then
                    got = true
                end
            until got or not line
            ngx.say(status, ", first delta seen: ", tostring(got))
            sock:close()
            ngx.sleep(0.3)
            local st = d.status()
            ngx.say("after: active=", st.curl.active, " sockets=",
                    st.curl.sockets, " cancelled=", st.curl.cancelled)
        }
    }
--- request
GET /abort3
--- timeout: 10
--- response_body
HTTP/1.1 200 OK, first delta seen: true
after: active=0 sockets=0 cancelled=1
--- no_error_log
[error]
[alert]



=== TEST 6: a group cap of 4 shared by 16 calls of one request
--- request
GET /many?n=16&group=4&barrier=4&latency=0.05&uri=/chat
--- timeout: 20
--- response_body
ok=16/16 provider_saw=16 max_in_flight=4
active=0 sockets=0 completed=16



=== TEST 7: group and provider caps together: the smaller one wins
--- request
GET /many?n=12&group=6&barrier=6&latency=0.05&uri=/capped
--- timeout: 20
--- response_body
ok=12/12 provider_saw=12 max_in_flight=6
active=0 sockets=0 completed=12



=== TEST 8: aborting a request with calls waiting for its group frees everything
--- config
    location = /abort4 {
        content_by_lua_block {
            local d = require "llm_driver"
            local sock = ngx.socket.tcp()
            assert(sock:connect("127.0.0.1", ngx.var.server_port))
            assert(sock:send("GET /many?n=8&group=2&latency=2&uri=/capped "
                             .. "HTTP/1.1\r\nHost: x\r\n\r\n"))
            ngx.sleep(0.3)
            local st = d.status()
            ngx.say("before: active=", st.curl.active)
            sock:close()
            ngx.sleep(0.3)
            st = d.status()
            local p
            for _, x in ipairs(st.providers) do
                if x.name == "capped" then p = x end
            end
            ngx.say("after: active=", st.curl.active, " sockets=",
                    st.curl.sockets, " cancelled=", st.curl.cancelled,
                    " provider active=", p.active, " waiting=", p.waiting)
            local res = d.chat("/chat", d.user("still fine"))
            ngx.say("next call: ", res.status, " ", d.content(res))
        }
    }
--- request
GET /abort4
--- timeout: 10
--- response_body
before: active=2
after: active=0 sockets=0 cancelled=2 provider active=0 waiting=0
next call: 200 echo: still fine
--- no_error_log
[error]
[alert]
