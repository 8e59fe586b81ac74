# Model calls through the curl layer (ngx_http_rlm_curl.c, _llm.c) against
# the scripted mock upstream (t/lib/mock_llm.lua) served by the same nginx:
# plain and SSE answers, usage, request shaping, keep-alive reuse.

use RlmTest 'no_plan';

$ENV{RLM_TEST_KEY} = 'sk-test-4f1d9c2e-KEEP-ME-SECRET';

add_block_preprocessor(sub {
    my $block = shift;

    my $http = $block->http_config // '';
    $block->set_value('http_config', <<'_EOC_' . $http);
    lua_shared_dict mock_llm 8m;
    rlm_provider mock url=http://127.0.0.1:$TEST_NGINX_SERVER_PORT/v1
                 key_env=RLM_TEST_KEY model=mock-model retries=2
                 backoff=10ms timeout=5s;
_EOC_

    # the key reaches the module through nginx's env directive
    my $main = $block->main_config // '';
    $block->set_value('main_config', "    env RLM_TEST_KEY;\n" . $main);

    my $config = $block->config // '';
    $block->set_value('config', <<'_EOC_' . $config);
    location = /v1/chat/completions {
        content_by_lua_block { require("mock_llm").serve() }
    }
    location = /chat { rlm_chat_passthrough mock; }
    location = /status { rlm_llm_status; }
_EOC_
});

run_tests();

__DATA__

=== TEST 1: plain call: content, finish reason, exact usage, one attempt
--- config
    location = /t {
        content_by_lua_block {
            local d = require "llm_driver"
            local res = d.chat("/chat", d.user("hello"))
            local j = res.json
            ngx.say(res.status, " ", d.content(res), " ",
                    j.choices[1].finish_reason, " ", j.model)
            ngx.say("usage ", j.usage.prompt_tokens, " ",
                    j.usage.completion_tokens, " ", j.usage.total_tokens)
            ngx.say("attempts ", res.header["X-RLM-Attempts"])
        }
    }
--- request
GET /t
--- response_body
200 echo: hello stop mock-model
usage 2 3 5
attempts 1



=== TEST 2: what the provider receives: default model, no stream, key only in Authorization
--- config
    location = /t {
        content_by_lua_block {
            local d = require "llm_driver"
            local mock = require "mock_llm"
            local cjson = require "cjson.safe"
            d.chat("/chat", d.user("first", { temperature = 0.5 }))
            d.chat("/chat", d.user("second", { model = "other-model" }))
            local key = os.getenv("RLM_TEST_KEY")
            for _, r in ipairs(mock.recorded()) do
                local body = cjson.decode(r.body)
                ngx.say(body.model, " stream=", tostring(body.stream),
                        " temperature=", tostring(body.temperature),
                        " auth_ok=", tostring(r.authorization
                                              == "Bearer " .. key),
                        " key_in_body=",
                        tostring(r.body:find(key, 1, true) ~= nil),
                        " type=", r.content_type)
            end
        }
    }
--- main_config
    env RLM_TEST_KEY;
--- request
GET /t
--- response_body
mock-model stream=nil temperature=0.5 auth_ok=true key_in_body=false type=application/json
other-model stream=nil temperature=nil auth_ok=true key_in_body=false type=application/json



=== TEST 3: SSE upstream: pieces assembled, usage chunk parsed
--- config
    location = /t {
        content_by_lua_block {
            local d = require "llm_driver"
            local mock = require "mock_llm"
            local cjson = require "cjson.safe"
            local res = d.chat("/chat", d.user("s", { mock = {
                chunks = { "Hel", "lo, ", "stre", "amed ", "world" },
                content = "ignored when chunks are given",
                usage = { prompt_tokens = 11, completion_tokens = 7,
                          total_tokens = 18 } } }), true)
            local j = res.json
            ngx.say(res.status, " [", d.content(res), "] ",
                    j.choices[1].finish_reason)
            ngx.say("usage ", j.usage.prompt_tokens, " ",
                    j.usage.completion_tokens, " ", j.usage.total_tokens)
            local sent = cjson.decode(mock.recorded()[1].body)
            ngx.say("asked stream=", tostring(sent.stream),
                    " include_usage=",
                    tostring(sent.stream_options.include_usage))
        }
    }
--- request
GET /t
--- response_body
200 [Hello, streamed world] stop
usage 11 7 18
asked stream=true include_usage=true



=== TEST 4: SSE upstream with CRLF line ends, comments and split events
--- config
    location = /t {
        content_by_lua_block {
            local d = require "llm_driver"
            local raw = ": keep-alive\r\n\r\n"
                .. 'data: {"id":"x1","choices":[{"delta":{"content":"a"}}]}\r\n\r\n'
                .. 'data: {"choices":[{"delta":{"content":"b"},\r\n'
                .. 'data: "finish_reason":"length"}]}\r\n\r\n'
                .. 'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\r\n\r\n'
                .. "data: [DONE]\r\n\r\n"
            local res = d.chat("/chat", d.user("s", { mock = { sse_raw = raw } }),
                               true)
            local j = res.json
            ngx.say(res.status, " ", d.content(res), " ",
                    j.choices[1].finish_reason, " ", j.id)
            ngx.say("usage ", j.usage.prompt_tokens, " ",
                    j.usage.completion_tokens, " ", j.usage.total_tokens)
        }
    }
--- request
GET /t
--- response_body
200 ab length x1
usage 3 2 5



=== TEST 5: a provider that ignores "stream" and answers JSON is understood
--- config
    location = /t {
        content_by_lua_block {
            local d = require "llm_driver"
            local res = d.chat("/chat", d.user("json please",
                                        { mock = { stream = false } }), true)
            ngx.say(res.status, " ", d.content(res))
        }
    }
--- request
GET /t
--- response_body
200 echo: json please



=== TEST 6: no usage from the provider: usage is null, not invented
--- config
    location = /t {
        content_by_lua_block {
            local d = require "llm_driver"
            local cjson = require "cjson.safe"
            local res = d.chat("/chat", d.user("x", { mock = { usage = false } }))
            ngx.say(res.status, " ", d.content(res), " ",
                    tostring(res.json.usage == cjson.null))
        }
    }
--- request
GET /t
--- response_body
200 echo: x true



=== TEST 7: the client asks for a stream: chat.completion.chunk events, usage, [DONE]
--- request
POST /chat
{"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}],"mock":{"chunks":["one ","two"],"usage":{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6}}}
--- response_headers
Content-Type: text/event-stream
--- response_body_like eval
qr/\A(data: \{[^\n]*"object":"chat\.completion\.chunk"[^\n]*\}\n\n)*data: \{[^\n]*"delta":\{"content":"one "\}[^\n]*\n\ndata: \{[^\n]*"delta":\{"content":"two"\}[^\n]*\n\ndata: \{[^\n]*"finish_reason":"stop"[^\n]*\n\ndata: \{[^\n]*"choices":\[\],"usage":\{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6\}\}\n\ndata: \[DONE\]\n\n\z/s



=== TEST 8: keep-alive: sequential calls reuse one upstream connection
--- config
    location = /t {
        content_by_lua_block {
            local d = require "llm_driver"
            local mock = require "mock_llm"
            for i = 1, 4 do
                d.chat("/chat", d.user("call " .. i))
            end
            local conns, reqs = {}, {}
            for _, r in ipairs(mock.recorded()) do
                conns[r.connection] = true
                reqs[#reqs + 1] = r.connection_requests
            end
            local n = 0
            for _ in pairs(conns) do n = n + 1 end
            ngx.say("connections ", n, ", requests on it ",
                    table.concat(reqs, ","))
        }
    }
--- request
GET /t
--- response_body
connections 1, requests on it 1,2,3,4



=== TEST 9: status before any call: nothing running, provider listed
--- request
GET /status
--- response_body_like chomp
^\{"pid":\d+,"connections":\d+,"curl":\{"active":0,"sockets":0,"connections":0,"started":0,"completed":0,"cancelled":0\},"providers":\[\{"name":"mock","active":0,"waiting":0\}\]\}$



=== TEST 10: non-JSON or message-less body is a 400 in OpenAI's envelope
--- request
POST /chat
{"model":"x"}
--- error_code: 400
--- response_body_like chomp
"type":"invalid_request_error".*"code":"invalid_body"



=== TEST 11: GET is not allowed
--- request
GET /chat
--- error_code: 405
--- response_body_like chomp
"code":"method_not_allowed"



=== TEST 12: a key from key_file is sent as a Bearer token
--- user_files
>>> provider.key
  sk-file-key-0123

--- http_config
    rlm_provider filekey url=http://127.0.0.1:$TEST_NGINX_SERVER_PORT/v1
                 key_file=../html/provider.key model=m;
--- config
    location = /filekey { rlm_chat_passthrough filekey; }
    location = /t {
        content_by_lua_block {
            local d = require "llm_driver"
            local res = d.chat("/filekey", d.user("k"))
            ngx.say(res.status, " ", require("mock_llm").recorded()[1].authorization)
        }
    }
--- request
GET /t
--- response_body
200 Bearer sk-file-key-0123



=== TEST 13: a provider without a key sends no Authorization header
--- http_config
    rlm_provider nokey url=http://127.0.0.1:$TEST_NGINX_SERVER_PORT/v1 model=m;
--- config
    location = /nokey { rlm_chat_passthrough nokey; }
    location = /t {
        content_by_lua_block {
            local d = require "llm_driver"
            local res = d.chat("/nokey", d.user("k"))
            ngx.say(res.status, " ", tostring(require("mock_llm").recorded()[1].authorization))
        }
    }
--- request
GET /t
--- response_body
200 nil



=== TEST 14: gzip-compressed answers are decoded
--- http_config
    rlm_provider gz url=http://127.0.0.1:$TEST_NGINX_SERVER_PORT/gz/v1
                 model=m;
--- config
    location = /gz/v1/chat/completions {
        gzip on;
        gzip_types application/json;
        gzip_min_length 0;
        content_by_lua_block {
            require("mock_llm").serve()
            ngx.shared.mock_llm:set("accept_encoding",
                                    ngx.var.http_accept_encoding)
        }
    }
    location = /gzchat { rlm_chat_passthrough gz; }
    location = /t {
        content_by_lua_block {
            local d = require "llm_driver"
            local res = d.chat("/gzchat", d.user(string.rep("zip ", 100)))
            ngx.say(res.status, " ", #d.content(res), " ",
                    tostring(ngx.shared.mock_llm:get("accept_encoding")
                             :find("gzip", 1, true) ~= nil))
        }
    }
--- request
GET /t
--- response_body
200 406 true



=== TEST 15: a 2 MB prompt goes through whole
--- config
    location = /t {
        content_by_lua_block {
            local d = require "llm_driver"
            local big = string.rep("0123456789abcdef", 131072)
            local res = d.chat("/chat", d.user(big))
            local c = d.content(res)
            ngx.say(res.status, " ", #c, " ", tostring(c == "echo: " .. big))
        }
    }
--- timeout: 60
--- request
GET /t
--- response_body
200 2097158 true
