# The policy's body cap (body_max) holds before the body is read: a
# Content-Length over it gets 413 in the error envelope at once, without
# "100 Continue" and with the connection closed, and a chunked body is
# stopped at the cap while it arrives (ngx_http_rlm_body_limit(), called
# from lua/rlm/shaping.lua through FFI).  The handler behind the policy
# is a stand-in that says whether it ran.

use FindBin;
use RlmTest 'no_plan';

our $Root = $RlmTest::Root;

no_shuffle();
timeout(10);

add_block_preprocessor(sub {
    my $block = shift;

    $block->set_value('http_config', <<"CONF");
    lua_package_path "$Root/lua/?.lua;;";
    include $Root/conf/policy.conf;
    init_by_lua_block {
        require("rlm.policy").configure{ body_max = 1000 }
    }
CONF

    $block->set_value('config', <<"CONF");
    include $Root/conf/policy-server.conf;
    location = /v1/chat/completions {
        client_max_body_size 0;
        access_by_lua_block { require("rlm.policy").access() }
        content_by_lua_block { ngx.say("the handler ran") }
    }
CONF
});

run_tests();

__DATA__

=== TEST 1: a Content-Length over body_max: 413 before the body, no 100 Continue, connection closed
--- raw_request eval
"POST /v1/chat/completions HTTP/1.1\r
Host: localhost\r
Content-Type: application/json\r
Expect: 100-continue\r
Content-Length: 400000000\r
\r
"
--- error_code: 413
--- response_headers
Content-Type: application/json
Connection: close
--- response_body_like: ^\{"error":\{.*"code":"body_too_large".*\}\}$
--- raw_response_headers_unlike: 100 Continue
--- error_log
client intended to send a body of 400000000 bytes, more than 1000
--- no_error_log
[error]



=== TEST 2: the envelope has its four members
--- raw_request eval
"POST /v1/chat/completions HTTP/1.0\r
Host: localhost\r
Content-Length: 1001\r
\r
"
--- error_code: 413
--- response_body eval
'{"error":{"message":"the request body is larger than 1000 bytes",'
. '"type":"invalid_request_error","param":null,"code":"body_too_large"}}'
. "\n"
--- no_error_log
[error]



=== TEST 3: a chunked body is stopped at body_max while it is read
--- raw_request eval
"POST /v1/chat/completions HTTP/1.1\r
Host: localhost\r
Content-Type: application/json\r
Transfer-Encoding: chunked\r
Connection: close\r
\r
7d0\r
" . ("x" x 2000) . "\r
0\r
\r
"
--- error_code: 413
--- response_body_like: "code":"body_too_large"
--- response_body_unlike: the handler ran
--- error_log
client intended to send a body larger than 1000 bytes



=== TEST 4: a body at body_max passes to the handler
--- request eval
"POST /v1/chat/completions\n"
. '{"model":"m","messages":[{"role":"user","content":"'
. ("x" x 900) . '"}]}'
--- more_headers
Content-Type: application/json
--- response_body
the handler ran
--- no_error_log
[error]
