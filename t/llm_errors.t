# Failures of model calls: retries with backoff on 429/5xx/connection
# errors (Retry-After honoured), no retry where it cannot help, timeouts,
# malformed answers, and the provider key kept out of logs and answers.

use RlmTest 'no_plan';

$ENV{RLM_TEST_KEY} = 'sk-test-9b7e5d3c-NEVER-LOG-ME';

add_block_preprocessor(sub {
    my $block = shift;

    my $http = $block->http_config // '';
    $block->set_value('http_config', <<'_EOC_' . $http);
    lua_shared_dict mock_llm 8m;
    rlm_provider mock url=http://127.0.0.1:$TEST_NGINX_SERVER_PORT/v1
                 key_env=RLM_TEST_KEY model=mock-model retries=2
                 backoff=10ms backoff_max=40ms timeout=10s;
    rlm_provider short url=http://127.0.0.1:$TEST_NGINX_SERVER_PORT/v1
                 model=mock-model retries=2 backoff=10ms timeout=1s;
_EOC_

    # the key reaches the module through nginx's env directive
    my $main = $block->main_config // '';
    $block->set_value('main_config', "    env RLM_TEST_KEY;\n" . $main);

    my $config = $block->config // '';
    $block->set_value('config', <<'_EOC_' . $config);
    location = /v1/chat/completions {
        content_by_lua_block { require("mock_llm").serve() }
    }
    location = /mock/script {
        content_by_lua_block { require("mock_llm").script() }
    }
    location = /chat { rlm_chat_passthrough mock; }
    location = /short { rlm_chat_passthrough short; }
    location = /status { rlm_llm_status; }
    location = /t {
        content_by_lua_block {
            local d = require "llm_driver"
            local mock = require "mock_llm"
            local cjson = require "cjson.safe"
            local body = cjson.decode(ngx.unescape_uri(ngx.var.arg_body or "{}"))
            local res = d.chat(ngx.var.arg_uri or "/chat",
                               d.user("q", body), ngx.var.arg_sse ~= nil)
            local seen = mock.recorded()
            ngx.say(res.status, " ", d.error_code(res) or d.content(res),
                    " attempts=", res.header["X-RLM-Attempts"],
                    " seen=", #seen)
            if ngx.var.arg_gap and #seen >= 2 then
                ngx.say("gap_ok=", tostring(seen[2].time - seen[1].time
                                            >= tonumber(ngx.var.arg_gap)))
            end
            local st = d.status()
            ngx.say("active=", st.curl.active, " sockets=", st.curl.sockets)
        }
    }
_EOC_
});

# query strings carry JSON: escape it
sub esc {
    my $s = shift;
    $s =~ s/([^A-Za-z0-9_.~-])/sprintf("%%%02X", ord $1)/ge;
    return $s;
}

no_long_string();
run_tests();

__DATA__

=== TEST 1: 429 with Retry-After: 1, then success: waited at least 1 s, 2 requests
--- config
    location = /setup {
        content_by_lua_block {
            local res = ngx.location.capture("/mock/script", {
                method = ngx.HTTP_POST,
                body = '{"id":"r429","steps":[{"status":429,"retry_after":1},'
                       .. '{"content":"after the wait"}]}' })
            ngx.exec("/t", "body=" .. ngx.escape_uri('{"model":"script:r429"}')
                           .. "&gap=0.95")
        }
    }
--- request
GET /setup
--- timeout: 10
--- response_body
200 after the wait attempts=2 seen=2
gap_ok=true
active=0 sockets=0
--- error_log
attempt 1 failed (HTTP 429
retrying in 1000 ms
--- no_error_log
[error]



=== TEST 2: 500 on every attempt: retries exhausted, 502 with a clear error
--- request eval
"GET /t?body=" . main::esc('{"mock":{"status":500,"error":"overloaded"}}')
--- timeout: 10
--- error_code: 200
--- response_body
502 provider_error attempts=3 seen=3
active=0 sockets=0
--- error_log
call to provider "mock" failed after 3 attempt(s): HTTP 500: overloaded



=== TEST 3: the error answer itself, as a client sees it
--- request
POST /chat
{"mock":{"status":503,"error":"down for maintenance"},"messages":[{"role":"user","content":"x"}]}
--- timeout: 10
--- error_code: 502
--- response_headers
X-RLM-Attempts: 3
X-RLM-Upstream-Status: 503
--- response_body
{"error":{"message":"HTTP 503: down for maintenance","type":"upstream_error","param":null,"code":"provider_error"}}
--- error_log
failed after 3 attempt(s)



=== TEST 4: 503 then success
--- config
    location = /setup {
        content_by_lua_block {
            ngx.location.capture("/mock/script", {
                method = ngx.HTTP_POST,
                body = '{"id":"s","steps":[{"status":503},{"content":"ok now"}]}' })
            ngx.exec("/t", "body=" .. ngx.escape_uri('{"model":"script:s"}'))
        }
    }
--- request
GET /setup
--- response_body
200 ok now attempts=2 seen=2
active=0 sockets=0
--- error_log
attempt 1 failed (HTTP 503
--- no_error_log
[error]



=== TEST 5: 400 from the provider is not retried
--- request eval
"GET /t?body=" . main::esc('{"mock":{"status":400,"error":"bad request"}}')
--- response_body
502 provider_error attempts=1 seen=1
active=0 sockets=0
--- error_log
failed after 1 attempt(s): HTTP 400: bad request



=== TEST 6: a provider that hangs: timeout, 504, not retried
--- request eval
"GET /t?uri=/short&body=" . main::esc('{"mock":{"hang":3}}')
--- timeout: 10
--- response_body
504 provider_timeout attempts=1 seen=1
active=0 sockets=0
--- error_log
no complete answer within the timeout



=== TEST 7: malformed JSON body: clear error, not retried
--- request eval
"GET /t?body=" . main::esc('{"mock":{"body":"{\"choices\": [tru"}}')
--- response_body
502 provider_malformed_response attempts=1 seen=1
active=0 sockets=0
--- error_log
response is not a JSON object



=== TEST 8: JSON without choices[0].message
--- request eval
"GET /t?body=" . main::esc('{"mock":{"body":"{\"object\":\"chat.completion\",\"choices\":[]}"}}')
--- response_body
502 provider_malformed_response attempts=1 seen=1
active=0 sockets=0
--- error_log
response has no choices[0].message



=== TEST 9: a stream event that is not JSON
--- request eval
"GET /t?sse=1&body=" . main::esc('{"mock":{"sse_raw":"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: garbage\n\n"}}')
--- response_body
502 provider_malformed_response attempts=1 seen=1
active=0 sockets=0
--- error_log
stream event is not a JSON object



=== TEST 10: a stream that stops before [DONE] and without a finish reason
--- request eval
"GET /t?sse=1&body=" . main::esc('{"mock":{"sse_raw":"data: {\"choices\":[{\"delta\":{\"content\":\"half\"}}]}\n\n"}}')
--- response_body
502 provider_malformed_response attempts=1 seen=1
active=0 sockets=0
--- error_log
stream ended before [DONE]



=== TEST 11: an error event inside the stream
--- request eval
"GET /t?sse=1&body=" . main::esc('{"mock":{"sse_raw":"data: {\"error\":{\"message\":\"context length exceeded\"}}\n\n"}}')
--- response_body
502 provider_error attempts=1 seen=1
active=0 sockets=0
--- error_log
error event in the stream: context length exceeded



=== TEST 12: connection closed without an answer: retried as a connection error
--- request eval
"GET /t?body=" . main::esc('{"mock":{"drop":true}}')
--- timeout: 10
--- response_body
502 provider_unreachable attempts=3 seen=3
active=0 sockets=0
--- error_log
failed after 3 attempt(s): Empty reply from server



=== TEST 13: nothing listens: connection refused, retried, then 502
--- http_config
    rlm_provider closed url=http://127.0.0.1:1/v1 model=m retries=1
                 backoff=10ms;
--- config
    location = /closed { rlm_chat_passthrough closed; }
--- request eval
"GET /t?uri=/closed&body={}"
--- response_body
502 provider_unreachable attempts=2 seen=0
active=0 sockets=0
--- error_log
rlm: call to provider "closed" failed after 2 attempt(s)



=== TEST 14: Retry-After beyond retry_after_max: give up at once
--- http_config
    rlm_provider impatient url=http://127.0.0.1:$TEST_NGINX_SERVER_PORT/v1
                 model=m retries=3 retry_after_max=2s;
--- config
    location = /impatient { rlm_chat_passthrough impatient; }
--- request eval
"GET /t?uri=/impatient&body=" . main::esc('{"mock":{"status":429,"retry_after":3600}}')
--- response_body
502 provider_rate_limited attempts=1 seen=1
active=0 sockets=0
--- error_log
asks to retry after 3600000 ms, more than retry_after_max



=== TEST 15: an answer above max_response is refused
--- http_config
    rlm_provider small url=http://127.0.0.1:$TEST_NGINX_SERVER_PORT/v1
                 model=m retries=0 max_response=2k;
--- config
    location = /small { rlm_chat_passthrough small; }
--- request eval
"GET /t?uri=/small&body=" . main::esc('{"mock":{"content":"' . ("x" x 5000) . '"}}')
--- response_body
502 provider_response_too_large attempts=1 seen=1
active=0 sockets=0
--- error_log
response larger than 2048 bytes



=== TEST 16: a provider that echoes the key: redacted in the log and the answer
--- main_config
    env RLM_TEST_KEY;
--- http_config
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1;
        error_log logs/mock.log debug;
        location / { content_by_lua_block { require("mock_llm").serve() } }
    }
    rlm_provider iso url=http://127.0.0.1:$TEST_NGINX_RAND_PORT_1/v1
                 key_env=RLM_TEST_KEY model=m retries=0;
--- config
    location = /iso { rlm_chat_passthrough iso; }
    location = /echo {
        content_by_lua_block {
            local d = require "llm_driver"
            local key = os.getenv("RLM_TEST_KEY")
            local res = d.chat("/iso", d.user("x", { mock = {
                status = 401,
                error = "Incorrect API key provided: " .. key } }))
            ngx.say(res.status, " ", d.error_code(res), " ",
                    res.json.error.message)
        }
    }
--- request
GET /echo
--- response_body
502 provider_error HTTP 401: Incorrect API key provided: [redacted]
--- error_log
HTTP 401: Incorrect API key provided: [redacted]
--- no_error_log
NEVER-LOG-ME



=== TEST 17: at debug level the key reaches no log line; the provider gets it only in Authorization
--- log_level: debug
--- http_config
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1;
        error_log logs/mock.log debug;
        location / { content_by_lua_block { require("mock_llm").serve() } }
    }
    rlm_provider iso url=http://127.0.0.1:$TEST_NGINX_RAND_PORT_1/v1
                 key_env=RLM_TEST_KEY model=m retries=1 backoff=10ms;
--- config
    location = /iso { rlm_chat_passthrough iso; }
    location = /check {
        content_by_lua_block {
            local d = require "llm_driver"
            local mock = require "mock_llm"
            d.chat("/iso", d.user("tell me the key", { mock = { status = 500 } }))
            d.chat("/iso", d.user("and now", {}), true)
            local key = "sk-test-9b7e5d3c-NEVER-LOG-ME"
            local leaks, auth = 0, 0
            for _, r in ipairs(mock.recorded()) do
                if r.body:find(key, 1, true) then leaks = leaks + 1 end
                if r.authorization == "Bearer " .. key then auth = auth + 1 end
            end
            ngx.say("requests=", #mock.recorded(), " auth=", auth,
                    " leaks=", leaks)
        }
    }
--- request
GET /check
--- response_body
requests=3 auth=3 leaks=0
--- error_log
failed after 2 attempt(s)
--- no_error_log
NEVER-LOG-ME
Bearer



=== TEST 18: a deadline shorter than the next backoff: give up after one attempt
--- http_config
    rlm_provider patient url=http://127.0.0.1:$TEST_NGINX_SERVER_PORT/v1
                 model=m retries=3 backoff=10s backoff_max=10s;
--- config
    location = /patient { rlm_chat_passthrough patient; }
--- more_headers
X-RLM-Deadline: 4000
--- request eval
"GET /t?uri=/patient&body=" . main::esc('{"mock":{"status":500}}')
--- response_body
502 provider_error attempts=1 seen=1
active=0 sockets=0
--- error_log
failed after 1 attempt(s): HTTP 500



=== TEST 19: the deadline cuts an attempt shorter than the provider's timeout
--- http_config
    rlm_provider long url=http://127.0.0.1:$TEST_NGINX_SERVER_PORT/v1
                 model=m retries=0 timeout=30s;
--- config
    location = /long { rlm_chat_passthrough long; }
--- more_headers
X-RLM-Deadline: 300
--- request eval
"GET /t?uri=/long&body=" . main::esc('{"mock":{"hang":2}}')
--- timeout: 10
--- response_body
504 provider_timeout attempts=1 seen=1
active=0 sockets=0
--- error_log
no complete answer within the timeout



=== TEST 20: a call whose deadline passes while it waits for a slot
--- http_config
    rlm_provider single url=http://127.0.0.1:$TEST_NGINX_SERVER_PORT/v1
                 model=m retries=0 max_concurrent=1;
--- config
    location = /single { rlm_chat_passthrough single; }
    location = /queue {
        content_by_lua_block {
            local cjson = require "cjson.safe"
            ngx.req.set_header("X-RLM-Deadline", "300")
            local body = cjson.encode({ mock = { latency = 1 },
                messages = { { role = "user", content = "x" } } })
            local a, b = ngx.location.capture_multi({
                { "/single", { method = ngx.HTTP_POST, body = body } },
                { "/single", { method = ngx.HTTP_POST, body = body } } })
            for _, r in ipairs({ a, b }) do
                local j = cjson.decode(r.body)
                ngx.say(r.status, " ", j.error.code, " attempts<=1:",
                        tostring(tonumber(r.header["X-RLM-Attempts"]) <= 1))
            end
            local st = require("llm_driver").status()
            ngx.say("active=", st.curl.active, " sockets=", st.curl.sockets)
        }
    }
--- request
GET /queue
--- timeout: 10
--- response_body
504 provider_timeout attempts<=1:true
504 provider_timeout attempts<=1:true
active=0 sockets=0
--- error_log
rlm: call to provider "single" failed
