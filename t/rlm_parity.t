# POST /v1/chat/completions: what users of the reference RLM library
# expect.  A limit never answers with the raw text of a ```repl reply;
# usage_by_model counts calls that carried no usage; the cost of calls
# (rlm_completion_prices) in usage and the rlm field, and rlm.max_cost
# as a budget; a system prompt from the request where the location
# allows it; sampling arguments for sub-calls; rlm_query(..., context=);
# "reset": true in the body.

use FindBin;
use lib "$FindBin::Bin/api_lib";
use lib "$FindBin::Bin/loop_lib";
use RlmTest 'no_plan';
use RlmLoop;

no_shuffle();
run_tests();

__DATA__

=== TEST 1: max_error_cells: one last plain call answers, with the failed outputs
--- config
    location = /strict {
        rlm_completions;
        rlm_max_error_cells 2;
    }
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local rlmt = require "rlmt"
            local cjson = require "cjson"
            l.script("root", {
                { content = "trying\n" .. l.repl("1 / 0") },
                { content = "again\n" .. l.repl("[][1]") },
                { content = "I could not compute it; my guess is 3." },
            })
            local res = rlmt.http("POST", "/strict",
                                  cjson.encode(l.ask("go", { context = "x" })))
            local j = res.json
            ngx.say(res.status, " ", j.choices[1].finish_reason, " ",
                    j.rlm.limit, " cells=", j.rlm.cells, " answer=",
                    l.q(l.answer(res)))
            local reqs = l.requests("script:root")
            local last = l.last_message(reqs[3])
            ngx.say("root calls ", #reqs, " asks for the answer: ",
                    last:find("Too many blocks in a row failed", 1, true)
                    ~= nil, " shows the error: ",
                    last:find("IndexError", 1, true) ~= nil)
        }
    }
--- request
GET /t
--- response_body
200 length max_error_cells cells=2 answer="I could not compute it; my guess is 3."
root calls 3 asks for the answer: true shows the error: true



=== TEST 2: max_tokens on a reply with code: its text without the block
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local u = { prompt_tokens = 5, completion_tokens = 50,
                        total_tokens = 55 }
            l.script("root", {
                { content = "The answer looks like 12.\n"
                            .. l.repl("print(12)"), usage = u },
            })
            local res = l.complete(l.ask("go", { context = "x",
                                                 max_tokens = 10 }))
            local j = res.json
            ngx.say(res.status, " ", j.rlm.limit, " ", l.q(l.answer(res)))
        }
    }
--- request
GET /t
--- response_body
200 max_tokens "The answer looks like 12."



=== TEST 3: a reply that is only code is never the answer
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = "First idea: 7.\n" .. l.repl("x = 7") },
                { content = l.repl("y = 8") },
                -- the last plain call disobeys and writes code
                { content = l.repl("print(x + y)") },
            })
            local res = l.complete(l.ask("go", { context = "x",
                                   rlm = { max_iterations = 2 } }))
            local j = res.json
            ngx.say(res.status, " ", j.rlm.limit, " ", l.q(l.answer(res)),
                    " ", #l.requests("script:root"))
        }
    }
--- request
GET /t
--- response_body
200 max_iterations "First idea: 7." 3



=== TEST 4: usage_by_model counts calls whose response carried no usage
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = l.repl("r = llm_query('hi')"), usage = false },
                { content = l.repl("answer.update(content=r, ready=True)"),
                  usage = { prompt_tokens = 3, completion_tokens = 2,
                            total_tokens = 5 } },
            })
            l.script("sub", { { content = "hello", usage = false } })
            local res = l.complete(l.ask("go", { context = "x",
                                   rlm = { sub_model = "script:sub" } }))
            local j = res.json
            local root = j.rlm.usage_by_model["script:root"]
            local sub = j.rlm.usage_by_model["script:sub"]
            ngx.say(res.status, " ", l.answer(res), " calls ", j.rlm.calls)
            ngx.say("root ", root.calls, " ", root.total_tokens)
            ngx.say("sub ", sub and sub.calls, " ", sub and sub.total_tokens)
            ngx.say("usage ", j.usage.total_tokens, " cost ",
                    tostring(j.usage.cost))
        }
    }
--- request
GET /t
--- response_body
200 hello calls 3
root 2 5
sub 1 0
usage 5 cost nil



=== TEST 5: prices: the cost of every call in usage, the rlm field and $rlm_cost
--- config
    location = /priced {
        rlm_completion_prices "script:root 1000 2000 script:sub 10.5 0";
        add_header X-Cost $rlm_cost;
        rlm_completions;
    }
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local rlmt = require "rlmt"
            local cjson = require "cjson"
            local u = { prompt_tokens = 100, completion_tokens = 10,
                        total_tokens = 110 }
            l.script("root", {
                { content = l.repl("r = llm_query('hi')"), usage = u },
                { content = l.repl("answer.update(content=r, ready=True)"),
                  usage = u },
            })
            l.script("sub", { { content = "hello", usage = {
                prompt_tokens = 1000, completion_tokens = 99,
                total_tokens = 1099 } } })
            local res = rlmt.http("POST", "/priced", cjson.encode(
                l.ask("go", { context = "x",
                              rlm = { sub_model = "script:sub" } })))
            local j = res.json
            local f = function(v) return string.format("%.4f", v) end
            -- root: 2 x (100 x 1000 + 10 x 2000) / 1e6 = 0.24
            -- sub: 1000 x 10.5 / 1e6 = 0.0105
            ngx.say(res.status, " usage.cost ", f(j.usage.cost),
                    " rlm.cost ", f(j.rlm.cost))
            ngx.say("root ", f(j.rlm.usage_by_model["script:root"].cost),
                    " sub ", f(j.rlm.usage_by_model["script:sub"].cost))
            ngx.say("header ", res.headers["x-cost"])
        }
    }
--- request
GET /t
--- response_body
200 usage.cost 0.2505 rlm.cost 0.2505
root 0.2400 sub 0.0105
header 0.250500



=== TEST 6: rlm.max_cost stops the loop with finish_reason length, limit max_cost
--- config
    location = /priced {
        rlm_completion_prices "script:root 1000 2000";
        rlm_completions;
    }
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local rlmt = require "rlmt"
            local cjson = require "cjson"
            local u = { prompt_tokens = 100, completion_tokens = 10,
                        total_tokens = 110 }
            l.script("root", {
                { content = "step one\n" .. l.repl("x = 1"), usage = u },
                { content = "step two\n" .. l.repl("x = 2"), usage = u },
                { content = "step three\n" .. l.repl("x = 3"), usage = u },
            })
            local res = rlmt.http("POST", "/priced", cjson.encode(
                l.ask("go", { context = "x", rlm = { max_cost = 0.2 } })))
            local j = res.json
            ngx.say(res.status, " ", j.choices[1].finish_reason, " ",
                    j.rlm.limit, " ", l.q(l.answer(res)), " iterations ",
                    j.rlm.iterations, " cost ",
                    string.format("%.2f", j.usage.cost))
            res = rlmt.http("POST", "/priced", cjson.encode(
                l.ask("go", { context = "x", rlm = { max_cost = 0 } })))
            ngx.say(res.status, " ", res.json.error.param)
        }
    }
--- request
GET /t
--- response_body
200 length max_cost "step two" iterations 2 cost 0.24
400 rlm.max_cost



=== TEST 7: code may not start model calls once the cost budget is spent
--- config
    location = /priced {
        rlm_completion_prices "script:root 0 0 script:sub 1000000 0";
        rlm_completions;
    }
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local rlmt = require "rlmt"
            local cjson = require "cjson"
            l.script("root", {
                { content = l.repl(
                    "a = llm_query('one')",
                    "try:",
                    "    llm_query('two')",
                    "    b = 'ran'",
                    "except RuntimeError as e:",
                    "    b = str(e)",
                    "answer.update(content=b, ready=True)") },
            })
            l.script("sub", { { content = "x", usage = {
                prompt_tokens = 1, completion_tokens = 0,
                total_tokens = 1 } } })
            local res = rlmt.http("POST", "/priced", cjson.encode(
                l.ask("go", { context = "x", rlm = { max_cost = 0.5,
                              sub_model = "script:sub" } })))
            ngx.say(res.status, " ", l.answer(res))
            ngx.say("sub calls ", #l.requests("script:sub"))
        }
    }
--- request
GET /t
--- response_body
200 the completion's cost budget (max_cost) is spent
sub calls 1



=== TEST 8: rlm.system_prompt where the location allows it, refused elsewhere
--- config
    location = /own {
        rlm_request_system_prompt on;
        rlm_completions;
    }
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local rlmt = require "rlmt"
            local cjson = require "cjson"
            l.script("root", {
                { content = l.repl("answer.update(content='ok', ready=True)") },
            })
            local body = l.ask("go", { context = "x",
                rlm = { system_prompt = "You are a terse pirate." } })
            local res = rlmt.http("POST", "/own", cjson.encode(body))
            local sent = l.requests("script:root")[1].req.messages[1]
            ngx.say(res.status, " ", l.answer(res), " ", sent.role, ": ",
                    sent.content)
            res = l.complete(body)
            ngx.say(res.status, " ", res.json.error.code, " ",
                    res.json.error.param)
        }
    }
--- request
GET /t
--- response_body
200 ok system: You are a terse pirate.
400 invalid_value rlm.system_prompt



=== TEST 9: rlm.sub_sampling reaches llm_query and child loops, not the root
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = l.repl(
                    "a = llm_query('p')",
                    "b = rlm_query('q')",
                    "answer.update(content=a + b, ready=True)") },
            })
            l.script("sub", {
                { content = "s" },
                { content = l.repl("answer.update(content='c', ready=True)") },
            })
            local res = l.complete(l.ask("go", { context = "x",
                temperature = 1,
                rlm = { sub_model = "script:sub",
                        sub_sampling = { temperature = 0.25, max_tokens = 64,
                                         stop = { "END" } } } }))
            ngx.say(res.status, " ", l.answer(res))
            local root = l.requests("script:root")[1].req
            ngx.say("root ", root.temperature, " ", tostring(root.max_tokens))
            for i, r in ipairs(l.requests("script:sub")) do
                ngx.say("sub ", i, " ", r.req.temperature, " ",
                        r.req.max_tokens, " ", r.req.stop[1])
            end
            for _, bad in ipairs({ { temperature = 3 }, { top_k = 5 },
                                   { stop = { 1 } }, "hot" }) do
                res = l.complete(l.ask("go", { context = "x",
                                       rlm = { sub_sampling = bad } }))
                ngx.say(res.status, " ", res.json.error.param)
            end
        }
    }
--- request
GET /t
--- response_body
200 sc
root 1 nil
sub 1 0.25 64 END
sub 2 0.25 64 END
400 rlm.sub_sampling
400 rlm.sub_sampling
400 rlm.sub_sampling
400 rlm.sub_sampling



=== TEST 10: rlm_query(query, context=...): the child's context is its own
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = l.repl(
                    "r = rlm_query('How many items?', context=[10, 20, 30])",
                    "answer.update(content=r, ready=True)") },
            })
            l.script("child", {
                { content = l.repl(
                    "answer.update(content=type(context).__name__ + ' '"
                    .. " + str(sum(context)), ready=True)") },
            })
            local res = l.complete(l.ask("go", { context = "x",
                                   rlm = { sub_model = "script:child" } }))
            ngx.say(res.status, " ", l.answer(res))
            local first = l.requests("script:child")[1].req.messages[2]
            ngx.say("query: ",
                    first.content:find("Query: How many items?", 1, true)
                    ~= nil, " list: ",
                    first.content:find("list of 3 items", 1, true) ~= nil)
        }
    }
--- request
GET /t
--- response_body
200 list 60
query: true list: true



=== TEST 11: at the maximum depth rlm_query(..., context=) reads the context first
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = l.repl(
                    "r = rlm_query('Sum them.', context='1 2 3')",
                    "answer.update(content=r, ready=True)") },
            })
            l.script("sub", { { content = "6" } })
            local res = l.complete(l.ask("go", { context = "x",
                rlm = { sub_model = "script:sub", max_depth = 0 } }))
            ngx.say(res.status, " ", l.answer(res))
            ngx.say(l.q(l.requests("script:sub")[1].req.messages[1].content))
        }
    }
--- request
GET /t
--- response_body
200 6
"1 2 3\n\nSum them."



=== TEST 12: "reset": true in the body replaces the session's sandbox
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = l.repl("x = 5",
                                   "answer.update(content='set', ready=True)") },
                { content = l.repl("answer.update(content=str('x' in globals()),"
                                   .. " ready=True)") },
            })
            local res = l.complete(l.ask("go", { context = "a" }))
            local id = res.headers["x-rlm-session-id"]
            ngx.say(res.status, " ", l.answer(res))
            local function h() return { ["X-RLM-Session-Id"] = id } end
            res = l.complete(l.ask("go", { context = "b" }), h())
            ngx.say("kept: ", l.answer(res))
            res = l.complete(l.ask("go", { context = "c", reset = true }), h())
            if res.status ~= 200 then ngx.say(res.status, res.body) return end
            ngx.say("reset: ", l.answer(res), " same id ",
                    res.headers["x-rlm-session-id"] == id, " turn ",
                    res.json.rlm.turn)
            res = l.complete(l.ask("go", { context = "d", reset = "yes" }), h())
            ngx.say(res.status, " ", res.json.error.param)
        }
    }
--- request
GET /t
--- response_body
200 set
kept: True
reset: False same id true turn 0
400 reset



=== TEST 13: compaction: past the threshold the sub model summarises older turns
--- http_config
    rlm_trajectory_dir $TEST_NGINX_SERVER_ROOT/traj_temp;
--- config
    location ~ ^/v1/sessions/[^/]+/trajectories(/.*)?$ { rlm_trajectories; }
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local rlmt = require "rlmt"
            local cjson = require "cjson"
            local big = { prompt_tokens = 150, completion_tokens = 10,
                          total_tokens = 160 }
            l.script("root", {
                { content = "first look\n" .. l.repl("x = 41", "print(x)"),
                  usage = big },
                { content = "second look\n" .. l.repl("print(x + 1)"),
                  usage = big },
                { content = l.repl("answer.update(content=str(x + 1),"
                                   .. " ready=True)"), usage = big },
            })
            l.script("sub", { { content = "x is 41; x + 1 printed 42." } })
            local res = l.complete(l.ask("go", { context = "abc",
                rlm = { sub_model = "script:sub",
                        compaction_threshold = 100 } }))
            local j = res.json
            ngx.say(res.status, " ", l.answer(res), " compactions ",
                    j.rlm.compactions, " sub calls ",
                    j.rlm.usage_by_model["script:sub"].calls)
            local sub = l.requests("script:sub")[1].req.messages[1].content
            -- the first response and its output; the last one is kept
            ngx.say("summarised: ",
                    sub:find("first look", 1, true) ~= nil, " ",
                    sub:find("Output of block 1", 1, true) ~= nil, " ",
                    sub:find("second look", 1, true) ~= nil)
            local third = l.requests("script:root")[3].req.messages
            ngx.say("third prompt: ", #third, " ", third[3].role, " ",
                    third[3].content:find("x + 1 printed 42.", 1, true)
                    ~= nil, " ", third[4].content:sub(1, 11))
            local tr = rlmt.http("GET", "/v1/sessions/" .. j.rlm.session
                                 .. "/trajectories/" .. j.id)
            local lines = {}
            for line in tr.body:gmatch("[^\n]+") do
                lines[#lines + 1] = cjson.decode(line)
            end
            local c = lines[4].compaction
            ngx.say("trajectory: ", lines[4].iteration, " ", c.messages_before,
                    " -> ", c.messages_after, " ", c.summary)
            -- off by default
            l.script("root", {
                { content = "a\n" .. l.repl("x = 1"), usage = big },
                { content = "b\n" .. l.repl("x = 2"), usage = big },
                { content = l.repl("answer.update(content='ok', ready=True)"),
                  usage = big },
            })
            res = l.complete(l.ask("go", { context = "abc",
                rlm = { sub_model = "script:sub" } }))
            ngx.say(res.status, " ", tostring(res.json.rlm.compactions), " ",
                    #l.requests("script:root")[6].req.messages)
        }
    }
--- request
GET /t
--- response_body
200 42 compactions 1 sub calls 1
summarised: true true false
third prompt: 5 user true second look
trajectory: 3 6 -> 5 x is 41; x + 1 printed 42.
200 nil 6



=== TEST 14: a forged rlm_query call whose context is not a str, list or dict is a protocol error, nothing starts
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                -- the runtime's own sender, with a context it never sends
                { content = l.repl(
                    "send = rlm_query.__globals__['_call']",
                    "send('rlm_query', {'prompt': 'p', 'context': 5})") },
                { content = l.repl("answer.update(content='survived',"
                                   .. " ready=True)") },
            })
            local res = l.complete(l.ask("go", { context = "x",
                                   rlm = { sub_model = "script:child" } }))
            ngx.say(res.status, " ", l.answer(res))
            local fed = l.last_message(l.requests("script:root")[2])
            ngx.say(fed:match("Output of block 1 %((%a[%a_]*),"), " ",
                    fed:find("context is not a string", 1, true) ~= nil)
            ngx.say("child calls ", #l.requests("script:child"))
        }
    }
--- request
GET /t
--- response_body
200 survived
sandbox_error true
child calls 0
--- no_error_log
[alert]
exited on signal
