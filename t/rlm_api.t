# POST /v1/chat/completions as an HTTP API: sessions by header and
# cookie, multi-turn context_N/history_N, reset, streaming, provider
# failures that keep the session, bad input in the OpenAI envelope.

use FindBin;
use lib "$FindBin::Bin/api_lib";
use lib "$FindBin::Bin/loop_lib";
use RlmTest 'no_plan';
use RlmLoop;

no_shuffle();
run_tests();

__DATA__

=== TEST 1: the session id comes back; the next completion in it sees context_1, history_0 and earlier variables
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local rlmt = require "rlmt"
            l.script("root", {
                { content = l.repl("kept = 'from turn 1'",
                                   "answer.update(content=context, ready=True)") },
                { content = l.repl(
                    "answer.update(content=' | '.join([context, context_0,"
                    .. " context_1, kept, str(len(history_0)),"
                    .. " history_0[0]['role']]), ready=True)") },
            })
            local res = l.complete(l.ask("first", { context = "alpha" }))
            local id = res.headers["x-rlm-session-id"]
            ngx.say(res.status, " ", l.answer(res), " turn ",
                    res.json.rlm.turn, " id ", #id)
            res = l.complete(l.ask("second", { context = "beta" }),
                             { ["X-RLM-Session-Id"] = id })
            ngx.say(res.status, " ", l.answer(res), " turn ",
                    res.json.rlm.turn, " same ",
                    res.headers["x-rlm-session-id"] == id)
            local first = l.requests("script:root")[2].req.messages[2].content
            ngx.say(first:find("`context_1` is the new context", 1, true)
                    ~= nil, " ", first:find("`history_0`", 1, true) ~= nil)
            local s = rlmt.http("GET", "/v1/sessions/" .. id).json
            ngx.say("session usage completions=", s.usage.completions,
                    " cells=", s.cells)
        }
    }
--- request
GET /t
--- response_body_like
200 alpha turn 0 id 32
200 alpha \| alpha \| beta \| from turn 1 \| \d+ \| system turn 1 same true
true true
session usage completions=2 cells=\d+



=== TEST 2: the same session by cookie, echoed back; X-RLM-Reset gives a fresh interpreter under the same id
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = l.repl("v = 'set'", "answer.update(content=v, ready=True)") },
                { content = l.repl("answer.update(content=str('v' in globals()), ready=True)") },
                { content = l.repl("answer.update(content=str('v' in globals()), ready=True)") },
            })
            local res = l.complete(l.ask("a", { context = "x" }))
            local id = res.headers["x-rlm-session-id"]
            res = l.complete(l.ask("b", { context = "x" }),
                             { Cookie = "other=1; rlm_session=" .. id })
            ngx.say(res.status, " ", l.answer(res), " ",
                    res.headers["x-rlm-session-id"] == id, " cookie ",
                    res.headers["set-cookie"] ==
                    "rlm_session=" .. id .. "; Path=/; HttpOnly; SameSite=Strict")
            res = l.complete(l.ask("c", { context = "x" }),
                             { ["X-RLM-Session-Id"] = id,
                               ["X-RLM-Reset"] = "1" })
            ngx.say(res.status, " ", l.answer(res), " ",
                    res.headers["x-rlm-session-id"] == id, " turn ",
                    res.json.rlm.turn)
        }
    }
--- request
GET /t
--- response_body
200 True true cookie true
200 False true turn 0



=== TEST 3: unknown and malformed session ids; another tenant's session is not found
--- config
    location = /tenant {
        rlm_completions;
        rlm_session_owner "tenant-b";
    }
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local rlmt = require "rlmt"
            local cjson = require "cjson"
            l.script("root", { { content = "FINAL(ok)" } })
            local res = l.complete(l.ask("q", { context = "x" }),
                                   { ["X-RLM-Session-Id"] = rlmt.id(77) })
            ngx.say(l.envelope(res), " ", res.json.error.param)
            res = l.complete(l.ask("q", { context = "x" }),
                             { ["X-RLM-Session-Id"] = "../../etc" })
            ngx.say(l.envelope(res), " ", res.json.error.param)
            res = l.complete(l.ask("q", { context = "x" }))
            local id = res.headers["x-rlm-session-id"]
            res = rlmt.http("POST", "/tenant",
                            cjson.encode(l.ask("q", { context = "x" })),
                            { ["X-RLM-Session-Id"] = id })
            ngx.say("other tenant: ", l.envelope(res))
        }
    }
--- request
GET /t
--- response_body
404 session_not_found invalid_request_error X-RLM-Session-Id
400 invalid_session_id invalid_request_error X-RLM-Session-Id
other tenant: 404 session_not_found invalid_request_error



=== TEST 4: bad requests get 4xx in the OpenAI envelope
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local rlmt = require "rlmt"
            local function show(label, res)
                local p = res.json and res.json.error
                          and res.json.error.param
                ngx.say(label, ": ", l.envelope(res), " ",
                        p == l.null and "nil" or tostring(p))
            end
            show("not json", l.complete("{nope"))
            show("array", l.complete("[]"))
            show("no messages", l.complete('{"model":"m"}'))
            show("empty messages", l.complete('{"messages":[]}'))
            show("no user", l.complete(
                '{"messages":[{"role":"system","content":"s"}]}'))
            show("bad content", l.complete(
                '{"messages":[{"role":"user","content":5}]}'))
            show("bad stream", l.complete(
                '{"messages":[{"role":"user","content":"q"}],"stream":"yes"}'))
            show("n=2", l.complete(
                '{"messages":[{"role":"user","content":"q"}],"n":2}'))
            show("max_tokens", l.complete(
                '{"messages":[{"role":"user","content":"q"}],"max_tokens":0}'))
            show("rlm type", l.complete(
                '{"messages":[{"role":"user","content":"q"}],"rlm":3}'))
            show("rlm iterations", l.complete(
                '{"messages":[{"role":"user","content":"q"}],'
                .. '"rlm":{"max_iterations":0}}'))
            show("GET", rlmt.http("GET", "/v1/chat/completions"))
        }
    }
--- request
GET /t
--- response_body
not json: 400 invalid_json invalid_request_error nil
array: 400 invalid_json invalid_request_error nil
no messages: 400 missing_field invalid_request_error messages
empty messages: 400 invalid_value invalid_request_error messages
no user: 400 invalid_value invalid_request_error messages
bad content: 400 invalid_value invalid_request_error messages
bad stream: 400 invalid_type invalid_request_error stream
n=2: 400 invalid_value invalid_request_error n
max_tokens: 400 invalid_value invalid_request_error max_tokens
rlm type: 400 invalid_type invalid_request_error rlm
rlm iterations: 400 invalid_value invalid_request_error rlm.max_iterations
GET: 405 method_not_allowed invalid_request_error nil
--- no_error_log
[error]



=== TEST 5: the provider fails: 502 in the envelope, and the session keeps its interpreter
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = l.repl("x = 41") },
                { status = 500, error = "provider down" },
                { content = l.repl("answer.update(content=str(x + 1), ready=True)") },
            })
            local res = l.complete(l.ask("a", { context = "x" }))
            local id = res.headers["x-rlm-session-id"]
            ngx.say(l.envelope(res), " id ", id ~= nil)
            res = l.complete(l.ask("b", { context = "x" }),
                             { ["X-RLM-Session-Id"] = id })
            ngx.say(res.status, " ", l.answer(res))
        }
    }
--- request
GET /t
--- response_body
502 provider_error upstream_error id true
200 42
--- error_log
provider down
--- no_error_log
[alert]



=== TEST 6: the provider hangs past the completion deadline: the best answer so far, finish_reason length, limit timeout
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = "Thinking about it.\n" .. l.repl("print(1)") },
                { hang = 5 },
            })
            local res = l.complete(l.ask("a", { context = "x",
                                               rlm = { timeout = 1 } }))
            local j = res.json
            ngx.say(res.status, " ", j.choices[1].finish_reason, " ",
                    j.rlm.limit, " ", l.q(l.answer(res):sub(1, 18)))
        }
    }
--- request
GET /t
--- response_body
200 length timeout "Thinking about it."
--- no_error_log
[alert]



=== TEST 7: stream: role chunk, progress comments, the answer, finish, usage, [DONE]
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = l.repl("print('hi')"),
                  usage = { prompt_tokens = 10, completion_tokens = 2,
                            total_tokens = 12 } },
                { content = l.repl("answer.update(content='streamed', ready=True)"),
                  usage = { prompt_tokens = 20, completion_tokens = 4,
                            total_tokens = 24 } },
            })
            local res = l.complete(l.ask("a", { context = "x",
                stream = true, stream_options = { include_usage = true } }))
            ngx.say(res.status, " ", res.headers["content-type"], " ",
                    #res.headers["x-rlm-session-id"])
            local events, comments, done = l.sse(res.body)
            ngx.say("events ", #events, " done ", done)
            ngx.say("first: ", events[1].object, " ",
                    events[1].choices[1].delta.role)
            ngx.say("content: ", events[2].choices[1].delta.content)
            ngx.say("finish: ", events[3].choices[1].finish_reason, " ",
                    events[3].rlm.iterations)
            ngx.say("usage: ", #events[4].choices, " ",
                    events[4].usage.prompt_tokens, " ",
                    events[4].usage.completion_tokens, " ",
                    events[4].usage.total_tokens)
            local ids = {}
            for _, e in ipairs(events) do ids[e.id] = true end
            local n = 0
            for _ in pairs(ids) do n = n + 1 end
            ngx.say("one id: ", n == 1)
            ngx.say("comments: ", (table.concat(comments, "; ")
                                   :gsub("%d+%.%d ms", "T ms")))
        }
    }
--- request
GET /t
--- response_body
200 text/event-stream 32
events 4 done true
first: chat.completion.chunk assistant
content: streamed
finish: stop 2
usage: 0 30 6 36
one id: true
comments: rlm depth 0 iteration 1; rlm depth 0 cell 1.1 ok T ms; rlm depth 0 iteration 2; rlm depth 0 cell 2.1 ok T ms



=== TEST 8: stream: a provider failure after the headers is an error event, then [DONE]
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", { { status = 500, error = "down" } })
            local res = l.complete(l.ask("a", { context = "x", stream = true }))
            local events, comments, done = l.sse(res.body)
            ngx.say(res.status, " ", #events, " ", events[2].error.code, " ",
                    events[2].error.type, " done ", done)
        }
    }
--- request
GET /t
--- response_body
200 2 provider_error upstream_error done true
--- error_log
down
--- no_error_log
[alert]



=== TEST 9: a client that goes away mid-completion cancels the model call; the session stays usable
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local rlmt = require "rlmt"
            local cjson = require "cjson"
            l.script("root", {
                { content = l.repl("y = 5", "answer.update(content='a', ready=True)") },
                { hang = 3 },
                { content = l.repl("answer.update(content=str(y), ready=True)") },
            })
            local res = l.complete(l.ask("a", { context = "x" }))
            local id = rlmt.http("GET", "/v1/sessions").json.data[1].id
            local _, err = rlmt.http("POST", "/v1/chat/completions",
                cjson.encode(l.ask("b", { context = "x" })),
                { ["X-RLM-Session-Id"] = id }, { abort_after = 0.5 })
            ngx.say("aborted: ", err)
            ngx.sleep(0.3)
            local st = cjson.decode(ngx.location.capture("/status").body)
            ngx.say("calls active ", st.curl.active, " cancelled ",
                    st.curl.cancelled)
            res = l.complete(l.ask("c", { context = "x" }),
                             { ["X-RLM-Session-Id"] = id })
            ngx.say(res.status, " ", l.answer(res))
        }
    }
    location = /status { rlm_llm_status; }
--- request
GET /t
--- response_body
aborted: aborted
calls active 0 cancelled 1
200 5



=== TEST 10: a trajectory per completion in the reference format, listed and served per session
--- http_config
    rlm_trajectory_dir traj_temp;
--- config
    location ~ ^/v1/sessions/[^/]+/trajectories(/.*)?$ { rlm_trajectories; }
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local rlmt = require "rlmt"
            local cjson = require "cjson"
            l.script("root", {
                { content = l.repl("r = llm_query('sub?')", "print(r)"),
                  usage = { prompt_tokens = 5, completion_tokens = 1,
                            total_tokens = 6 } },
                { content = l.repl("answer.update(content='traj done', ready=True)") },
            })
            local res = l.complete(l.ask("go", { context = "x",
                                   rlm = { sub_model = "echo" } }))
            local id, cid = res.headers["x-rlm-session-id"], res.json.id
            local list = rlmt.http("GET", "/v1/sessions/" .. id
                                          .. "/trajectories").json
            ngx.say("listed ", #list.data, " ", list.data[1].id == cid)
            local f = rlmt.http("GET", "/v1/sessions/" .. id
                                       .. "/trajectories/" .. cid)
            ngx.say(f.status, " ", f.headers["content-type"])
            local lines = {}
            for line in f.body:gmatch("[^\n]+") do
                lines[#lines + 1] = cjson.decode(line)
            end
            local m = lines[1]
            ngx.say("lines ", #lines, " ", m.type, " ", m.root_model, " ",
                    m.backend, " ", m.max_iterations, " ", m.completion_id == cid)
            local it1, it2 = lines[2], lines[3]
            ngx.say("1: ", it1.type, " ", it1.iteration, " prompt ",
                    #it1.prompt, " blocks ", #it1.code_blocks, " final ",
                    tostring(it1.final_answer))
            local b = it1.code_blocks[1]
            ngx.say("block: ", l.q(b.result.stdout), " calls ",
                    #b.result.rlm_calls, " ", b.result.rlm_calls[1].root_model,
                    " ", b.result.rlm_calls[1].prompt, " ",
                    type(b.result.execution_time))
            ngx.say("2: ", it2.iteration, " prompt ", #it2.prompt, " final ",
                    it2.final_answer, " time ", type(it2.iteration_time))
        }
    }
--- request
GET /t
--- response_body
listed 1 true
200 application/x-ndjson
lines 3 metadata script:root mock 30 true
1: iteration 1 prompt 2 blocks 1 final userdata: NULL
block: "echo: sub?\n" calls 1 echo sub? number
2: 2 prompt 4 final traj done time number



=== TEST 11: a client that goes away while a block computes: the block is interrupted, the interpreter lives on
--- http_config
    rlm_cell_timeout 60s;
    rlm_cell_cpu_time 60s;
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local rlmt = require "rlmt"
            local cjson = require "cjson"
            l.script("root", {
                { content = l.repl("kept = 'still here'",
                                   "answer.update(content='a', ready=True)") },
                { content = l.repl("started = True", "while True:", "    pass") },
                { content = l.repl("answer.update(content=kept + ' '"
                                   .. " + str(started), ready=True)") },
            })
            local res = l.complete(l.ask("a", { context = "x" }))
            local id = res.headers["x-rlm-session-id"]
            local _, err = rlmt.http("POST", "/v1/chat/completions",
                cjson.encode(l.ask("b", { context = "x" })),
                { ["X-RLM-Session-Id"] = id }, { abort_after = 1 })
            ngx.say("aborted: ", err)
            -- without the interrupt the spinning block holds the sandbox
            -- for its 60 s and this call times out after 15 s
            res = rlmt.http("POST", "/v1/chat/completions",
                cjson.encode(l.ask("c", { context = "x" })),
                { ["X-RLM-Session-Id"] = id }, { timeout = 15000 })
            ngx.say(res and res.status, " ", res and l.answer(res))
        }
    }
--- request
GET /t
--- timeout: 30
--- response_body
aborted: aborted
200 still here True



=== TEST 12: access log variables of a completion: session, iterations, tokens, sandbox time
--- http_config
    log_format rlmc 'S=$rlm_session_id I=$rlm_iterations T=$rlm_tokens '
                    'MS=$rlm_sandbox_ms';
--- config
    # no completions location
    location = /v1/chat/completions {
        access_log logs/completions.log rlmc;
        rlm_completions;
    }
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local u = { prompt_tokens = 40, completion_tokens = 2,
                        total_tokens = 42 }
            l.script("root", {
                { content = l.repl("x = 1"), usage = u },
                { content = l.repl("answer.update(content='v', ready=True)"),
                  usage = u },
            })
            local res = l.complete(l.ask("go", { context = "x" }))
            -- the log line is written just after the answer went out
            local line
            for _ = 1, 100 do
                local f = io.open(ngx.config.prefix() .. "logs/completions.log")
                line = f and f:read("*l")
                if f then f:close() end
                if line then break end
                ngx.sleep(0.02)
            end
            local s, i, t, ms = line:match("^S=(%x+) I=(%d+) T=(%d+) MS=([%d.]+)$")
            ngx.say(s == res.headers["x-rlm-session-id"], " ", i, " ", t, " ",
                    tonumber(ms) > 0)
        }
    }
--- request
GET /t
--- response_body
true 2 84 true



=== TEST 13: a large context string with every kind of escape arrives exactly (the fast path)
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local cjson = require "cjson"
            local parts = {}
            for i = 1, 4000 do
                parts[i] = "line " .. i .. ' "q" \\ / tab\t é 😀 \1 '
            end
            local ctx = table.concat(parts, "\n")
            l.script("root", {
                { content = l.repl(
                    "import hashlib",
                    "answer.update(content=str(len(context)) + ' '"
                    .. " + hashlib.md5(context.encode('utf-8')).hexdigest(),"
                    .. " ready=True)") },
            })
            -- cjson escapes / as \/ and control characters as \u00XX;
            -- add a surrogate pair by hand
            local body = cjson.encode(l.ask("go", { context = ctx }))
            body = body:gsub('😀', '\\ud83d\\ude00', 1)
            local res = l.complete(body)
            local chars = select(2, ctx:gsub("[^\128-\191]", ""))
            ngx.say(res.status, " ", l.answer(res) == chars .. " "
                                    .. ngx.md5(ctx), " ", #body > 65536)
            local first = l.requests("script:root")[1].req.messages[2].content
            ngx.say(first:find("str of " .. chars .. " characters in 4000 lines",
                               1, true) ~= nil)
        }
    }
--- request
GET /t
--- response_body
200 true true
true



=== TEST 14: a large body whose context is not a plain string still works, and a broken one is refused
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local cjson = require "cjson"
            l.script("root", {
                { content = l.repl(
                    "answer.update(content=type(context).__name__ + ' '"
                    .. " + str(len(context)), ready=True)") },
            })
            local items = {}
            for i = 1, 5000 do items[i] = "item number " .. i end
            local res = l.complete(cjson.encode(l.ask("go", { context = items })))
            ngx.say(res.status, " ", l.answer(res))
            local big = string.rep("x", 70000)
            res = l.complete('{"messages":[{"role":"user","content":"q"}],'
                             .. '"context":"' .. big .. '\\q"}')
            ngx.say(l.envelope(res))
            res = l.complete('{"messages":[{"role":"user","content":"q"}],'
                             .. '"context":"' .. big .. '","context":"again"}')
            ngx.say(l.envelope(res))
        }
    }
--- request
GET /t
--- response_body
200 list 5000
400 invalid_json invalid_request_error
400 invalid_json invalid_request_error



=== TEST 15: the provider's retries: a 429 then an answer completes; a malformed answer is a 502
--- http_config
    rlm_provider retrying url=http://127.0.0.1:$TEST_NGINX_SERVER_PORT/mock/v1
                 model=script:root retries=2 backoff=10ms timeout=10s;
--- config
    location = /retrying {
        rlm_completion_provider retrying;
        rlm_completions;
    }
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local rlmt = require "rlmt"
            local cjson = require "cjson"
            l.script("root", {
                { status = 429, retry_after = 0, error = "slow down" },
                { content = l.repl("answer.update(content='after a retry', ready=True)") },
                { body = "{not json" },
            })
            local res = rlmt.http("POST", "/retrying",
                                  cjson.encode(l.ask("a", { context = "x" })))
            ngx.say(res.status, " ", l.answer(res), " calls ",
                    res.json.rlm.calls, " requests ", #l.requests("script:root"))
            res = rlmt.http("POST", "/retrying",
                            cjson.encode(l.ask("b", { context = "x" })))
            ngx.say(l.envelope(res))
        }
    }
--- request
GET /t
--- response_body
200 after a retry calls 1 requests 2
502 provider_malformed_response upstream_error
--- error_log
attempt 1 failed (HTTP 429
--- no_error_log
[alert]



=== TEST 16: a large list or dict context goes to the sandbox's parser as text; broken JSON in it is a 400
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local cjson = require "cjson"
            l.script("root", {
                { content = l.repl(
                    "answer.update(content=type(context).__name__ + ' '"
                    .. " + str(len(context)) + ' ' + repr(context[1] if"
                    .. " isinstance(context, list) else context['k6']),"
                    .. " ready=True)") },
            })
            local items = {}
            for i = 1, 6000 do items[i] = "item \"" .. i .. "\" é" end
            items[2] = { 1, 2, { 3 } }
            local res = l.complete(cjson.encode(l.ask("go", { context = items })))
            ngx.say(res.status, " ", l.answer(res))
            local first = l.requests("script:root")[1].req.messages[2].content
            ngx.say(first:match("It is a list of [^.]*%."))
            local dict = {}
            for i = 1, 5000 do dict["k" .. i] = string.rep("v", i % 7) end
            res = l.complete(cjson.encode(l.ask("go", { context = dict })))
            ngx.say(res.status, " ", l.answer(res))
            first = l.requests("script:root")[2].req.messages[2].content
            ngx.say(first:match("It is a dict[^.]*%."))
            local body = cjson.encode(l.ask("go", { context = items }))
            body = body:gsub('"item \\"17\\" é",', '"item \\"17\\" é",,', 1)
            res = l.complete(body)
            ngx.say(l.envelope(res), " ", res.json.error.message:sub(1, 31),
                    " | ", res.json.error.message:match("Expecting value") or
                    res.json.error.message)
        }
    }
--- request
GET /t
--- response_body
200 list 6000 [1, 2, [3]]
It is a list of 6000 items; lengths of the first ones: 10, 3, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11 .
200 dict 5000 'vvvvvv'
It is a dict with 5000 keys.
400 invalid_json invalid_request_error the context is not valid JSON:  | Expecting value



=== TEST 17: a chunked completion body over the cap gets the 413 envelope, not nginx's page
--- http_config
    rlm_context_max_size 1m;
--- config
    location = /t {
        content_by_lua_block {
            local rlmt = require "rlmt"
            local piece = string.rep("x", 256 * 1024)
            local n = 0
            -- 1 MiB of context plus 1 MiB of slack is the cap: send 3 MiB
            local res = rlmt.http("POST", "/v1/chat/completions", function()
                local s
                if n == 0 then
                    s = '{"model":"rlm","messages":[{"role":"user",'
                        .. '"content":"go"}],"context":"'
                elseif n <= 12 then s = piece
                elseif n == 13 then s = '"}'
                elseif n == 14 then n = n + 1 return "0\r\n\r\n"
                else return nil end
                n = n + 1
                return string.format("%x\r\n", #s) .. s .. "\r\n"
            end, { ["Content-Type"] = "application/json",
                   ["Transfer-Encoding"] = "chunked" })
            ngx.say("chunked 3 MiB: ", rlmt.envelope(res))
            ngx.say(res.json.error.message)
        }
    }
--- request
GET /t
--- response_body
chunked 3 MiB: 413 body_too_large invalid_request_error
the request body is larger than 2097152 bytes
--- no_error_log
[alert]
[emerg]
