# Calls from sandbox code during a completion: llm_query and
# llm_query_batched on the sub model, rlm_query child loops with their own
# sandboxes, the shared state dict, errors as exceptions, exact usage
# sums across the whole tree.

use FindBin;
use lib "$FindBin::Bin/api_lib";
use lib "$FindBin::Bin/loop_lib";
use RlmTest 'no_plan';
use RlmLoop;

no_shuffle();
run_tests();

__DATA__

=== TEST 1: llm_query goes to the sub model; usage is summed exactly, per model too
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local u = function(p, c)
                return { prompt_tokens = p, completion_tokens = c,
                         total_tokens = p + c }
            end
            l.script("root", {
                { content = l.repl("r = llm_query('what is 6*7?')",
                                   "print(r)"), usage = u(100, 10) },
                { content = l.repl("answer.update(content=r, ready=True)"),
                  usage = u(200, 20) },
            })
            l.script("sub", { { content = "42", usage = u(7, 3) } })
            local res = l.complete(l.ask("go", { context = "x",
                                   rlm = { sub_model = "script:sub" } }))
            local j = res.json
            ngx.say(res.status, " ", l.answer(res))
            ngx.say("usage ", j.usage.prompt_tokens, " ",
                    j.usage.completion_tokens, " ", j.usage.total_tokens)
            local root = j.rlm.usage_by_model["script:root"]
            local sub = j.rlm.usage_by_model["script:sub"]
            ngx.say("root ", root.calls, " ", root.prompt_tokens, " ",
                    root.completion_tokens)
            ngx.say("sub ", sub.calls, " ", sub.prompt_tokens, " ",
                    sub.completion_tokens, " calls ", j.rlm.calls)
            local s = l.requests("script:sub")[1].req
            ngx.say("sub saw: ", s.messages[1].role, " ",
                    s.messages[1].content)
            local fed = l.last_message(l.requests("script:root")[2])
            ngx.say("fed: ", fed:find("\n42\n", 1, true) ~= nil)
        }
    }
--- request
GET /t
--- response_body
200 42
usage 307 33 340
root 2 300 30
sub 1 7 3 calls 3
sub saw: user what is 6*7?
fed: true



=== TEST 2: llm_query_batched: 8 prompts in flight at once, answers in order
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = l.repl(
                    "rs = llm_query_batched(['q%d' % i for i in range(8)])",
                    "answer.update(content=','.join(rs), ready=True)") },
            })
            -- every sub answer waits until all 8 are in flight
            l.script("sub", { { barrier = 8, content = "a" } })
            local res = l.complete(l.ask("go", { context = "x",
                                   rlm = { sub_model = "echo" } }))
            ngx.say(res.status, " ", l.answer(res))
            ngx.say("sub calls ", #l.requests("echo"))
        }
    }
--- request
GET /t
--- response_body
200 echo: q0,echo: q1,echo: q2,echo: q3,echo: q4,echo: q5,echo: q6,echo: q7
sub calls 8



=== TEST 3: batched calls really overlap (a barrier of 8 only opens if all 8 are in flight)
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = l.repl(
                    "rs = llm_query_batched(['p'] * 8)",
                    "answer.update(content=','.join(rs), ready=True)") },
            })
            l.script("sub", { { barrier = 8, barrier_timeout = 5,
                                content = "b" } })
            local res = l.complete(l.ask("go", { context = "x",
                                   rlm = { sub_model = "script:sub" } }))
            ngx.say(res.status, " ", l.answer(res))
            ngx.say("max in flight ", require("mock_llm").max_inflight())
        }
    }
--- request
GET /t
--- response_body
200 b,b,b,b,b,b,b,b
max in flight 8



=== TEST 4: the tree's cap on concurrent calls (rlm_max_concurrent_calls) holds
--- config
    location = /capped {
        rlm_completions;
        rlm_max_concurrent_calls 3;
    }
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local rlmt = require "rlmt"
            local cjson = require "cjson"
            l.script("root", {
                { content = l.repl(
                    "rs = llm_query_batched(['p'] * 9)",
                    "answer.update(content=str(len(rs)), ready=True)") },
            })
            l.script("sub", { { latency = 0.05, content = "c" } })
            local res = rlmt.http("POST", "/capped", cjson.encode(
                l.ask("go", { context = "x",
                              rlm = { sub_model = "script:sub" } })))
            ngx.say(res.status, " ", l.answer(res))
            ngx.say("max in flight ", require("mock_llm").max_inflight())
        }
    }
--- request
GET /t
--- response_body
200 9
max in flight 3



=== TEST 5: a failing sub-call is an exception in code, not the end of the completion
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = l.repl(
                    "try:",
                    "    llm_query('x')",
                    "except RuntimeError as e:",
                    "    msg = 'caught: ' + str(e)[:40]",
                    "rs = llm_query_batched(['a', 'b'])",
                    "answer.update(content=msg + ' | ' + rs[0][:7], ready=True)") },
            })
            l.script("sub", { { status = 500, error = "sub model down" } })
            local res = l.complete(l.ask("go", { context = "x",
                                   rlm = { sub_model = "script:sub" } }))
            ngx.say(res.status, " ", l.answer(res))
        }
    }
--- request
GET /t
--- response_body_like
^200 caught: .+ \| Error: 
--- error_log
HTTP 500: sub model down
--- no_error_log
[alert]



=== TEST 6: rlm_query runs a child loop with its own sandbox; the child's sandbox goes away after
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local rlmt = require "rlmt"
            l.script("root", {
                { content = l.repl(
                    "secret = 'root only'",
                    "r = rlm_query('the child gets this as context')",
                    "answer.update(content='child said: ' + r, ready=True)") },
            })
            l.script("child", {
                { content = l.repl(
                    "seen = 'secret' in globals()",
                    "answer.update(content=context[:9] + ' ' + str(seen),"
                    .. " ready=True)") },
            })
            local res = l.complete(l.ask("go", { context = "x",
                                   rlm = { sub_model = "script:child" } }))
            ngx.say(res.status, " ", l.answer(res))
            local list = rlmt.http("GET", "/v1/sessions")
            ngx.say("sessions left ", #list.json.data)
            local q = l.requests("script:child")[1].req.messages[2].content
            ngx.say("child query: ",
                    q:find("Query: the child gets this as context", 1, true)
                    ~= nil)
        }
    }
--- request
GET /t
--- response_body
200 child said: the child False
sessions left 1
child query: true



=== TEST 7: the shared state dict flows to children and back
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = l.repl(
                    "state['a'] = 20",
                    "rlm_query('add one')",
                    "answer.update(content=str(state.get('b')), ready=True)") },
            })
            l.script("child", {
                { content = l.repl(
                    "state['b'] = state['a'] + 1",
                    "answer.update(content='ok', ready=True)") },
            })
            local res = l.complete(l.ask("go", { context = "x",
                                   rlm = { sub_model = "script:child" } }))
            ngx.say(res.status, " ", l.answer(res))
        }
    }
--- request
GET /t
--- response_body
200 21



=== TEST 8: at the maximum depth rlm_query is a plain model call
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = l.repl(
                    "r = rlm_query('flat')",
                    "answer.update(content=r, ready=True)") },
            })
            local res = l.complete(l.ask("go", { context = "x",
                                   rlm = { sub_model = "echo",
                                           max_depth = 0 } }))
            ngx.say(res.status, " ", l.answer(res))
        }
    }
--- request
GET /t
--- response_body
200 echo: flat



=== TEST 9: usage sums across depth 2: root, child, grandchild and a sub-call of each
--- config
    location = /deep {
        rlm_completions;
        rlm_max_depth 2;
    }
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local rlmt = require "rlmt"
            local cjson = require "cjson"
            local u = function(p, c)
                return { prompt_tokens = p, completion_tokens = c,
                         total_tokens = p + c }
            end
            -- root and children all use the model "script:tree": the
            -- steps are taken in the order the calls are made
            l.script("tree", {
                { usage = u(1000, 100), content = l.repl(
                    "r = rlm_query('level 1')",
                    "answer.update(content='root<' + r + '>', ready=True)") },
                { usage = u(200, 20), content = l.repl(
                    "r = rlm_query('level 2')",
                    "answer.update(content='child<' + r + '>', ready=True)") },
                { usage = u(30, 3), content = l.repl(
                    "r = llm_query('leaf')",
                    "answer.update(content='grandchild<' + r + '>', ready=True)") },
                { usage = u(4, 1), content = "leaf answer" },
            })
            local res = rlmt.http("POST", "/deep", cjson.encode({
                model = "script:tree",
                messages = { { role = "user", content = "go" } },
                context = "x",
                rlm = { sub_model = "script:tree" } }))
            local j = res.json
            ngx.say(res.status, " ", l.answer(res))
            ngx.say("usage ", j.usage.prompt_tokens, " ",
                    j.usage.completion_tokens, " ", j.usage.total_tokens,
                    " calls ", j.rlm.calls)
        }
    }
--- request
GET /t
--- response_body
200 root<child<grandchild<leaf answer>>>
usage 1234 124 1358 calls 4



=== TEST 10: a key a child deletes from state is gone in the parent too
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = l.repl(
                    "state['tmp'] = 1",
                    "state['keep'] = 2",
                    "rlm_query('clean up')",
                    "answer.update(content=repr(sorted(state)), ready=True)") },
            })
            l.script("child", {
                { content = l.repl(
                    "del state['tmp']",
                    "answer.update(content='ok', ready=True)") },
            })
            local res = l.complete(l.ask("go", { context = "x",
                                   rlm = { sub_model = "script:child" } }))
            ngx.say(res.status, " ", l.answer(res))
        }
    }
--- request
GET /t
--- response_body
200 ['keep']
