# Compatibility with the official OpenAI SDK for Node.js (npm package
# "openai", version pinned in the Makefile, installed by `make npm-deps`
# into build/npm).  Each block starts nginx, then t/sdk/chat.cjs makes
# one client.chat.completions.create() call with the SDK, non-streaming or
# with "stream": true, and prints what the SDK understood; the block's
# request fetches that output and compares it.
#
# The endpoint under test is the location /v1/chat/completions.  Its
# directives come from the block's "--- endpoint" section, or $Endpoint
# below: today the passthrough (rlm_chat_passthrough) in front of the
# scripted mock upstream, which checks the SDK plumbing (headers, JSON,
# SSE framing, error envelopes).  A block for the RLM endpoint says
# "--- endpoint: rlm_completions;" (plus whatever its http_config needs).
#
# The script gives the SDK Node's built-in fetch unless a block says
# "--- sdk_transport: node-fetch" (the 4.x SDK's own default); see
# t/sdk/chat.cjs and docs/testing.md.
#
# Needs node and build/npm/node_modules/openai.  Without them the file is
# skipped, except when RLM_REQUIRE_NODE or CI is set (as .ci/run does):
# then it fails.

use RlmTest;

use File::Spec ();

our $Endpoint = 'rlm_chat_passthrough mock;';

our $Root = $RlmTest::Root;

$ENV{TEST_NGINX_RLM_SANDBOXD} ||= $ENV{RLM_SANDBOXD}
                                  || "$Root/build/bin/rlm-sandboxd";
our $Modules = $ENV{RLM_NODE_MODULES} || "$Root/build/npm/node_modules";
our $Script = "$Root/t/sdk/chat.cjs";
our $Node;

{
    my $required = grep { defined $_ && $_ ne '' && $_ ne '0'
                          && lc $_ ne 'false' }
                   @ENV{qw( RLM_REQUIRE_NODE CI )};
    my $why;

    ($Node) = grep { -x $_ }
              map { File::Spec->catfile($_, 'node') }
              File::Spec->path;

    if (!defined $Node) {
        $why = 'node is not installed (apt-get install nodejs npm)';

    } elsif (!-f "$Modules/openai/package.json") {
        $why = "the openai npm package is not in $Modules"
               . ' (make npm-deps)';
    }

    if (defined $why) {
        if ($required) {
            plan tests => 1;
            fail("openai SDK test cannot run: $why;"
                 . ' RLM_REQUIRE_NODE or CI is set, so this is a failure');
            exit 1;
        }
        plan skip_all => $why;
    }

    plan 'no_plan';

    my $nodever = `'$Node' -e 'process.stdout.write(process.version)'`;
    my $sdk = do {
        open my $fh, '<', "$Modules/openai/package.json" or die;
        local $/;
        (<$fh> =~ /"version"\s*:\s*"([^"]+)"/)[0] // '?';
    };
    diag("openai $sdk on node $nodever");
}

$ENV{RLM_TEST_KEY} = 'sk-provider-7c1e5a90-SERVER-SIDE';

if (Test::Nginx::Socket->can('register_sections')) {
    Test::Nginx::Socket::register_sections(qw( sdk sdk_base sdk_transport
                                                sdk_key sdk_request_id
                                                endpoint ));
}

# Run the SDK script against this block's nginx; its output (and exit
# code) becomes html/sdk.out, which the block's request fetches.
our @SdkCalls;
our @Rlm;

# blocks of the RLM endpoint run rlm-sandboxd (supervised by the master)
master_on();

# the manager starts with nginx: wait (at most 10 s) until it answers
sub wait_manager {
    require IO::Socket::INET;
    for (1 .. 100) {
        my $sock = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                         PeerPort => server_port());
        if ($sock) {
            print $sock "GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n";
            local $/;
            my $resp = <$sock> // '';
            close $sock;
            return 1 if $resp =~ /"manager":"reachable"/;
        }
        select(undef, undef, undef, 0.1);
    }
    return 0;
}

sub run_sdk ($) {
    my ($base, $params, $transport, $key, $request_id)
        = @{ $SdkCalls[$_[0]] };
    my $url = 'http://127.0.0.1:' . server_port() . $base;
    my $out = '';

    wait_manager() if $Rlm[$_[0]];

    local $ENV{NODE_PATH} = $Modules;
    local $ENV{RLM_SDK_TRANSPORT} = $transport;
    local $ENV{RLM_SDK_API_KEY} = $key;
    # the RLM endpoint's blocks also print the fields of OpenAI's shapes
    local $ENV{RLM_SDK_SHAPES} = $Rlm[$_[0]] ? '1' : '0';
    local $ENV{RLM_SDK_REQUEST_ID} = $request_id // '';

    # stderr goes into the output, so a crash shows in the body diff;
    # coreutils timeout: a hung SDK call must not hang the suite;
    # --no-warnings: node 18 calls its fetch experimental on stderr
    if (open my $fh, '-|', 'sh', '-c', 'exec "$@" 2>&1', 'sh',
             'timeout', '60', $Node, '--no-warnings', $Script, $url, $params)
    {
        local $/;
        $out = <$fh> // '';
        close $fh;
        $out .= 'exit ' . ($? >> 8) . "\n";

    } else {
        $out = "cannot run $Node: $!\n";
    }

    open my $fh, '>', html_dir() . '/sdk.out' or die "sdk.out: $!";
    print $fh $out;
    close $fh;
}

add_block_preprocessor(sub {
    my $block = shift;

    my $http = $block->http_config // '';
    $block->set_value('http_config', <<'_EOC_' . $http);
    lua_shared_dict mock_llm 8m;
    rlm_provider mock url=http://127.0.0.1:$TEST_NGINX_SERVER_PORT/mock/v1
                 key_env=RLM_TEST_KEY model=mock-model retries=2
                 backoff=10ms timeout=10s;
_EOC_

    my $main = $block->main_config // '';
    $block->set_value('main_config', "    env RLM_TEST_KEY;\n" . $main);

    my $endpoint = $block->endpoint // $Endpoint;
    chomp $endpoint;

    my $rlm = $endpoint =~ /\brlm_completions\b/;

    if ($rlm) {
        $block->set_value('http_config', $block->http_config . <<'_EOC_');
    lua_package_path "$TEST_NGINX_RLM_ROOT/lua/?.lua;$TEST_NGINX_RLM_ROOT/t/lib/?.lua;;";
    rlm_sandboxd $TEST_NGINX_RLM_SANDBOXD;
    rlm_runtime_dir $TEST_NGINX_SERVER_ROOT/rlm_temp;
    rlm_sessions_zone rlm_sessions 8m;
    rlm_pool_size 2;
_EOC_
    }

    my $config = $block->config // '';
    $block->set_value('config', <<"_EOC_" . <<'_EOC_' . $config);
    # as conf/rlm.conf does: every answer names its request
    add_header X-Request-Id \$rlm_request_id always;

    location = /v1/chat/completions { $endpoint }
_EOC_
    location = /mock/v1/chat/completions {
        content_by_lua_block { require("mock_llm").serve() }
    }
    location = /healthz { rlm_health; }

    # what the provider was sent, one line per request
    location = /recorded {
        content_by_lua_block {
            local cjson = require "cjson.safe"
            local key = os.getenv("RLM_TEST_KEY")
            for _, r in ipairs(require("mock_llm").recorded()) do
                local b = cjson.decode(r.body) or {}
                local so = type(b.stream_options) == "table"
                           and b.stream_options or {}
                ngx.say("model=", tostring(b.model),
                        " stream=", tostring(b.stream),
                        " include_usage=", tostring(so.include_usage),
                        " messages=", #(b.messages or {}),
                        " provider_key=",
                        tostring(r.authorization == "Bearer " .. key),
                        " client_key_seen=",
                        tostring(r.body:find("sk-client", 1, true) ~= nil
                                 or (r.authorization or ""):find(
                                        "sk-client", 1, true) ~= nil))
            end
        }
    }
_EOC_

    if (defined(my $params = $block->sdk)) {
        my $base = $block->sdk_base // '/v1';
        my $transport = $block->sdk_transport // 'fetch';
        my $key = $block->sdk_key // 'sk-client-side-key';
        my $request_id = $block->sdk_request_id;
        chomp($base, $transport, $key);
        chomp $request_id if defined $request_id;
        push @SdkCalls, [ $base, $params, $transport, $key, $request_id ];
        $Rlm[$#SdkCalls] = $rlm;
        $block->set_value('init', "main::run_sdk($#SdkCalls);");
        if (!defined $block->request && !defined $block->request_eval) {
            $block->set_value('request', "GET /sdk.out\n");
        }
    }
});

no_shuffle();
run_tests();

__DATA__

=== TEST 1: non-streaming call: the SDK parses the completion and our headers
--- sdk
{"model": "mock-model", "temperature": 0.5,
 "messages": [{"role": "system", "content": "be brief"},
              {"role": "user", "content": "hello"}]}
--- request eval
["GET /sdk.out", "GET /recorded"]
--- response_body eval
[<<'_EOS_', <<'_EOS_']
http 200
content-type "application/json"
x-rlm-attempts "1"
object "chat.completion"
id "chatcmpl-mock-1"
model "mock-model"
created "number"
choices 1
role "assistant"
content "echo: hello"
finish_reason "stop"
usage {"prompt_tokens":4,"completion_tokens":3,"total_tokens":7}
result "ok"
exit 0
_EOS_
model=mock-model stream=nil include_usage=nil messages=2 provider_key=true client_key_seen=false
_EOS_



=== TEST 2: non-streaming: escapes, non-ASCII text and finish_reason "length"
--- sdk
{"model": "mock-model", "max_tokens": 5,
 "messages": [{"role": "user", "content": "x"}],
 "mock": {"content": "l\u00ednea 1\n\"quoted\" \\ \t \u2713 \ud83d\ude00 </script>",
          "finish_reason": "length",
          "usage": {"prompt_tokens": 9, "completion_tokens": 5,
                    "total_tokens": 14}}}
--- response_body
http 200
content-type "application/json"
x-rlm-attempts "1"
object "chat.completion"
id "chatcmpl-mock-1"
model "mock-model"
created "number"
choices 1
role "assistant"
content "línea 1\n\"quoted\" \\ \t ✓ 😀 </script>"
finish_reason "length"
usage {"prompt_tokens":9,"completion_tokens":5,"total_tokens":14}
result "ok"
exit 0



=== TEST 3: streaming with include_usage: chunks, deltas, finish reason, usage chunk
--- sdk
{"model": "mock-model", "stream": true,
 "stream_options": {"include_usage": true},
 "messages": [{"role": "user", "content": "s"}],
 "mock": {"chunks": ["Hel", "lo, ", "stre", "amed ", "w\u00f6rld \ud83d\ude00"],
          "usage": {"prompt_tokens": 11, "completion_tokens": 7,
                    "total_tokens": 18}}}
--- request eval
["GET /sdk.out", "GET /recorded"]
--- response_body eval
[<<'_EOS_', <<'_EOS_']
http 200
content-type "text/event-stream"
x-rlm-attempts null
chunks 7
objects ["chat.completion.chunk"]
ids ["chatcmpl-mock-1"]
model "mock-model"
deltas ["Hel","lo, ","stre","amed ","wörld 😀"]
content "Hello, streamed wörld 😀"
finish_reason "stop"
usage {"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}
result "ok"
exit 0
_EOS_
model=mock-model stream=true include_usage=true messages=1 provider_key=true client_key_seen=false
_EOS_



=== TEST 4: streaming without include_usage: no usage chunk, usage stays null
--- sdk
{"model": "mock-model", "stream": true,
 "messages": [{"role": "user", "content": "s"}],
 "mock": {"chunks": ["a", "b"], "finish_reason": "length"}}
--- response_body
http 200
content-type "text/event-stream"
x-rlm-attempts null
chunks 3
objects ["chat.completion.chunk"]
ids ["chatcmpl-mock-1"]
model "mock-model"
deltas ["a","b"]
content "ab"
finish_reason "length"
usage null
result "ok"
exit 0



=== TEST 5: our 400 envelope becomes BadRequestError with type, code, message
--- sdk
{"model": "mock-model"}
--- request eval
["GET /sdk.out", "GET /recorded"]
--- response_body eval
[<<'_EOS_', ""]
result "error"
class "BadRequestError"
status 400
type "invalid_request_error"
code "invalid_body"
param null
error.message "expected a JSON object with \"messages\""
message "400 expected a JSON object with \"messages\""
error content-type "application/json"
exit 0
_EOS_



=== TEST 6: a provider error (404, not retried) becomes a 502 InternalServerError
--- sdk
{"model": "mock-model", "messages": [{"role": "user", "content": "x"}],
 "mock": {"status": 404, "error": "no such model"}}
--- response_body
result "error"
class "InternalServerError"
status 502
type "upstream_error"
code "provider_error"
param null
error.message "HTTP 404: no such model"
message "502 HTTP 404: no such model"
error content-type "application/json"
exit 0
--- error_log
failed after 1 attempt(s): HTTP 404: no such model



=== TEST 7: streaming call that fails before any text: an HTTP error, not a stream
--- sdk
{"model": "mock-model", "stream": true,
 "stream_options": {"include_usage": true},
 "messages": [{"role": "user", "content": "x"}],
 "mock": {"status": 400, "error": "bad request"}}
--- response_body
result "error"
class "InternalServerError"
status 502
type "upstream_error"
code "provider_error"
param null
error.message "HTTP 400: bad request"
message "502 HTTP 400: bad request"
error content-type "application/json"
exit 0
--- error_log
failed after 1 attempt(s): HTTP 400: bad request



=== TEST 8: streaming call that fails after text: the error event raises APIError
--- sdk
{"model": "mock-model", "stream": true,
 "messages": [{"role": "user", "content": "x"}],
 "mock": {"sse_raw": "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"partial \"}}]}\n\ndata: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"answer\"}}]}\n\n"}}
--- response_body
http 200
content-type "text/event-stream"
x-rlm-attempts null
chunks 2
objects ["chat.completion.chunk"]
ids ["c1"]
model "mock-model"
deltas ["partial ","answer"]
content "partial answer"
finish_reason null
usage null
result "error"
class "APIError"
status undefined
type "upstream_error"
code "provider_malformed_response"
param undefined
error.message "stream ended before [DONE]"
message "stream ended before [DONE]"
error content-type "text/event-stream"
exit 0
--- error_log
stream ended before [DONE]



=== TEST 9: SSE comments (keep-alive, progress) between events are ignored by the SDK
This checks the SDK, not our server: the stream is served as is by Lua.
The RLM endpoint sends such comment lines while it works.
--- config
    location = /sse/v1/chat/completions {
        content_by_lua_block {
            ngx.req.read_body()
            ngx.header["Content-Type"] = "text/event-stream"
            local head = '{"id":"chatcmpl-sse","object":"chat.completion.chunk",'
                         .. '"created":1,"model":"m","choices":'
            local function delta(d, finish)
                return "data: " .. head .. '[{"index":0,"delta":' .. d
                       .. ',"finish_reason":' .. finish .. '}]}'
            end
            local parts = {
                ": connected\n\n",
                ":\n\n",
                ": rlm progress iteration=1 state=running_code\n\n",
                delta('{"role":"assistant","content":""}', "null") .. "\n\n",
                ": keep-alive\n\n: keep-alive\n\n",
                ": progress before data, same event\n"
                    .. delta('{"content":"first "}', "null") .. "\n\n",
                ": rlm progress iteration=2 state=sub_calls\n",
                "\n",
                delta('{"content":"second"}', "null") .. "\n\n",
                ": keep-alive\r\n\r\n",
                delta("{}", '"stop"') .. "\n\n",
                ": keep-alive\n\n",
                "data: " .. head .. '[],"usage":{"prompt_tokens":1,'
                    .. '"completion_tokens":2,"total_tokens":3}}\n\n',
                ": done soon\n\n",
                "data: [DONE]\n\n",
            }
            for _, p in ipairs(parts) do
                ngx.print(p)
                ngx.flush(true)
                ngx.sleep(0.01)
            end
        }
    }
--- sdk_base: /sse/v1
--- sdk
{"model": "m", "stream": true, "stream_options": {"include_usage": true},
 "messages": [{"role": "user", "content": "x"}]}
--- response_body
http 200
content-type "text/event-stream"
x-rlm-attempts null
chunks 5
objects ["chat.completion.chunk"]
ids ["chatcmpl-sse"]
model "m"
deltas ["first ","second"]
content "first second"
finish_reason "stop"
usage {"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}
result "ok"
exit 0



=== TEST 10: the 4.x SDK's default transport (node-fetch, keep-alive): non-streaming
--- sdk_transport: node-fetch
--- sdk
{"model": "mock-model", "messages": [{"role": "user", "content": "via node-fetch"}]}
--- response_body
http 200
content-type "application/json"
x-rlm-attempts "1"
object "chat.completion"
id "chatcmpl-mock-1"
model "mock-model"
created "number"
choices 1
role "assistant"
content "echo: via node-fetch"
finish_reason "stop"
usage {"prompt_tokens":4,"completion_tokens":5,"total_tokens":9}
result "ok"
exit 0



=== TEST 11: node-fetch without keep-alive: streaming with include_usage
See t/sdk/chat.cjs for why keep-alive is off: node-fetch 2 on Node
releases with the CVE-2026-48931 fix fails every chunked answer.
--- sdk_transport: node-fetch-close
--- sdk
{"model": "mock-model", "stream": true,
 "stream_options": {"include_usage": true},
 "messages": [{"role": "user", "content": "s"}],
 "mock": {"chunks": ["node", "-fetch"],
          "usage": {"prompt_tokens": 1, "completion_tokens": 2,
                    "total_tokens": 3}}}
--- response_body
http 200
content-type "text/event-stream"
x-rlm-attempts null
chunks 4
objects ["chat.completion.chunk"]
ids ["chatcmpl-mock-1"]
model "mock-model"
deltas ["node","-fetch"]
content "node-fetch"
finish_reason "stop"
usage {"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}
result "ok"
exit 0



=== TEST 12: the RLM endpoint, non-streaming: the demo model finds a needle; usage and our id
--- endpoint: rlm_completions;
--- sdk
{"model": "rlm-demo",
 "messages": [{"role": "user", "content": "What is the secret word?"}],
 "context": "line one\nline two\nthe secret word is tangerine\nline four",
 "rlm": {"sub_model": "rlm-demo"}}
--- response_body_like
http 200
content-type "application/json"
x-rlm-attempts null
object "chat.completion"
id "chatcmpl-[0-9a-f]{24}"
model "rlm-demo"
created "number"
choices 1
role "assistant"
content "the secret word is tangerine"
finish_reason "stop"
usage \{"prompt_tokens":\d+,"completion_tokens":\d+,"total_tokens":\d+\}
_request_id "[0-9a-f]{32}"
system_fingerprint "ngx_rlm-\d+\.\d+\.\d+"
logprobs null
refusal null
result "ok"
exit 0



=== TEST 13: the RLM endpoint, streaming with usage: progress comments are skipped by the SDK
--- endpoint: rlm_completions;
--- sdk
{"model": "rlm-demo", "stream": true,
 "stream_options": {"include_usage": true},
 "messages": [{"role": "user", "content": "What is the secret word?"}],
 "context": ["alpha", "the secret word is quince", "gamma"],
 "rlm": {"sub_model": "rlm-demo"}}
--- response_body_like
http 200
content-type "text/event-stream"
x-rlm-attempts null
chunks 4
objects \["chat.completion.chunk"\]
ids \["chatcmpl-[0-9a-f]{24}"\]
model "rlm-demo"
deltas \["the secret word is quince"\]
content "the secret word is quince"
finish_reason "stop"
usage \{"prompt_tokens":\d+,"completion_tokens":\d+,"total_tokens":\d+\}
x-request-id "[0-9a-f]{32}"
system_fingerprints \["ngx_rlm-\d+\.\d+\.\d+"\]
choice logprobs \[null\]
chunk usage \["null","null","null","usage"\]
result "ok"
exit 0



=== TEST 14: the RLM endpoint: a bad request surfaces as the SDK's BadRequestError
--- endpoint: rlm_completions;
--- sdk
{"model": "rlm-demo", "n": 3,
 "messages": [{"role": "user", "content": "q"}]}
--- response_body_like
result "error"
class "BadRequestError"
status 400
type "invalid_request_error"
code "invalid_value"
param "n"
error.message "only n = 1 is supported"
message "400 only n = 1 is supported"
request_id "[0-9a-f]{32}"
error content-type "application/json"
exit 0



=== TEST 15: the RLM endpoint refuses tools by name: unsupported_parameter, param "tools"
--- endpoint: rlm_completions;
--- sdk
{"model": "rlm-demo",
 "messages": [{"role": "user", "content": "q"}],
 "tools": [{"type": "function",
            "function": {"name": "f", "parameters": {"type": "object"}}}]}
--- response_body
result "error"
class "BadRequestError"
status 400
type "invalid_request_error"
code "unsupported_parameter"
param "tools"
error.message "'tools' is not supported by this server: send the request without it"
message "400 'tools' is not supported by this server: send the request without it"
request_id "sdk-req-15.a:b_c"
error content-type "application/json"
exit 0
--- sdk_request_id: sdk-req-15.a:b_c



=== TEST 16: logprobs: true is refused, never answered without logprobs
--- endpoint: rlm_completions;
--- sdk
{"model": "rlm-demo", "logprobs": true, "top_logprobs": 2,
 "messages": [{"role": "user", "content": "q"}]}
--- response_body_like
result "error"
class "BadRequestError"
status 400
type "invalid_request_error"
code "unsupported_parameter"
param "(logprobs|top_logprobs)"



=== TEST 17: response_format json_schema is refused
--- endpoint: rlm_completions;
--- sdk
{"model": "rlm-demo",
 "response_format": {"type": "json_schema",
                     "json_schema": {"name": "x", "schema": {"type": "object"}}},
 "messages": [{"role": "user", "content": "q"}]}
--- response_body_like
class "BadRequestError"
status 400
type "invalid_request_error"
code "unsupported_parameter"
param "response_format"



=== TEST 18: an argument OpenAI does not define either: unknown_parameter naming it
--- endpoint: rlm_completions;
--- sdk
{"model": "rlm-demo", "temprature": 0.2,
 "messages": [{"role": "user", "content": "q"}]}
--- response_body_like
class "BadRequestError"
status 400
type "invalid_request_error"
code "unknown_parameter"
param "temprature"
error.message "Unrecognized request argument supplied: 'temprature'"



=== TEST 19: the harmless defaults of unsupported fields are accepted; a client id is echoed
n 1, logprobs false, top_logprobs 0, tool_choice "none", response_format
text, modalities ["text"], store false, parallel_tool_calls true: each asks
for what the endpoint does anyway.
--- endpoint: rlm_completions;
--- config
    log_by_lua_block {
        ngx.log(ngx.NOTICE, "logged request id ", ngx.var.rlm_request_id)
    }
--- sdk_request_id: client-id-19
--- sdk
{"model": "rlm-demo", "n": 1, "logprobs": false, "top_logprobs": 0,
 "tool_choice": "none", "response_format": {"type": "text"},
 "modalities": ["text"], "store": false, "parallel_tool_calls": true,
 "tools": null, "audio": null,
 "messages": [{"role": "user", "content": "What is the secret word?"}],
 "context": "the secret word is fig",
 "rlm": {"sub_model": "rlm-demo"}}
--- response_body_like
http 200
content-type "application/json"
x-rlm-attempts null
object "chat.completion"
id "chatcmpl-[0-9a-f]{24}"
model "rlm-demo"
created "number"
choices 1
role "assistant"
content "the secret word is fig"
finish_reason "stop"
usage \{"prompt_tokens":\d+,"completion_tokens":\d+,"total_tokens":\d+\}
_request_id "client-id-19"
system_fingerprint "ngx_rlm-\d+\.\d+\.\d+"
logprobs null
refusal null
result "ok"
exit 0
--- error_log
logged request id client-id-19



=== TEST 20: a client X-Request-Id that could split a log line is replaced
--- endpoint: rlm_completions;
--- config
    log_by_lua_block {
        ngx.log(ngx.NOTICE, "logged request id [", ngx.var.rlm_request_id,
                "]")
    }
--- sdk_request_id: bad id"with quotes
--- sdk
{"model": "rlm-demo", "n": 2,
 "messages": [{"role": "user", "content": "q"}]}
--- response_body_like
class "BadRequestError"
status 400
type "invalid_request_error"
code "invalid_value"
param "n"
.*request_id "[0-9a-f]{32}"
.*
--- error_log eval
qr/logged request id \[[0-9a-f]{32}\]/
