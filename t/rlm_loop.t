# POST /v1/chat/completions: the recursive loop against a scripted model,
# with real sandboxes: blocks run in order, outputs fed back, the final
# answer by the answer dict, FINAL_VAR() and the legacy markers, limits.

use FindBin;
use lib "$FindBin::Bin/api_lib";
use lib "$FindBin::Bin/loop_lib";
use RlmTest 'no_plan';
use RlmLoop;

no_shuffle();
run_tests();

__DATA__

=== TEST 1: two turns: a block looks at the context, the next one answers
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = "Let me look.\n" .. l.repl("print(len(context))") },
                { content = l.repl("n = len(context)",
                                   "answer['content'] = 'length ' + str(n)",
                                   "answer['ready'] = True") },
            })
            local res = l.complete(l.ask("How long is it?",
                                         { context = "hello world" }))
            local j = res.json
            ngx.say(res.status, " ", j.object, " ", l.answer(res), " ",
                    j.choices[1].finish_reason)
            ngx.say("id ", j.id:match("^chatcmpl%-%x+$") ~= nil,
                    " session header ",
                    res.headers["x-rlm-session-id"] == j.rlm.session,
                    " ", #j.rlm.session)
            ngx.say("iterations ", j.rlm.iterations, " cells ", j.rlm.cells,
                    " limit null ", j.rlm.limit == l.null)
            local reqs = l.requests("script:root")
            ngx.say("root calls ", #reqs)
            local first = reqs[1].req.messages
            ngx.say("first: ", first[1].role, " ", first[2].role, " ",
                    first[2].content:find("Query: How long is it?", 1, true)
                    ~= nil, " ",
                    first[2].content:find("str of 11 characters", 1, true)
                    ~= nil)
            local fed = l.last_message(reqs[2])
            ngx.say("fed back: ", l.q(fed:match("^[^\n]*\n[^\n]*")
                                      :gsub("%d+%.%d ms", "T ms")))
            ngx.say("turn: ", fed:find("Turn 2 of 30", 1, true) ~= nil)
        }
    }
--- request
GET /t
--- response_body
200 chat.completion length 11 stop
id true session header true 32
iterations 2 cells 2 limit null true
root calls 2
first: system user true true
fed back: "Output of block 1 (ok, T ms):\n11"
turn: true



=== TEST 2: several blocks in one response run in order in one namespace; other fences are ignored
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = l.repl("a = 1", "print('first', a)") .. "\n"
                            .. "```python\nprint('never')\n```\n"
                            .. l.repl("a += 1", "print('second', a)") },
                { content = l.repl("answer.update(content=str(a), ready=True)") },
            })
            local res = l.complete(l.ask("go", { context = "x" }))
            ngx.say(res.status, " answer=", l.answer(res),
                    " cells=", res.json.rlm.cells)
            local fed = l.last_message(l.requests("script:root")[2])
            ngx.say(fed:find("first 1", 1, true) ~= nil, " ",
                    fed:find("second 2", 1, true) ~= nil, " ",
                    fed:find("never", 1, true) == nil, " ",
                    fed:find("Output of block 2", 1, true) ~= nil)
        }
    }
--- request
GET /t
--- response_body
200 answer=2 cells=3
true true true true



=== TEST 3: CRLF fences run too
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = "```repl\r\nanswer['content'] = 'crlf ok'\r\n"
                            .. "answer['ready'] = True\r\n```\r\n" },
            })
            local res = l.complete(l.ask("go", { context = "x" }))
            ngx.say(res.status, " ", l.answer(res), " ",
                    res.json.rlm.iterations)
        }
    }
--- request
GET /t
--- response_body
200 crlf ok 1



=== TEST 4: legacy FINAL(...) in a response without blocks: nested parentheses kept
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = "I have it.\nFINAL(the answer is f(g(x)) (really))" },
            })
            local res = l.complete(l.ask("go", { context = "x" }))
            ngx.say(res.status, " [", l.answer(res), "] ",
                    res.json.choices[1].finish_reason, " cells=",
                    res.json.rlm.cells)
        }
    }
--- request
GET /t
--- response_body
200 [the answer is f(g(x)) (really)] stop cells=0



=== TEST 5: a FINAL marker next to a block is not an answer: the block runs and the loop goes on
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = l.repl("x = 41", "print(x)")
                            .. "\nFINAL(invented 99)" },
                { content = l.repl("answer.update(content=str(x + 1), ready=True)") },
            })
            local res = l.complete(l.ask("go", { context = "x" }))
            ngx.say(res.status, " ", l.answer(res), " iterations=",
                    res.json.rlm.iterations)
        }
    }
--- request
GET /t
--- response_body
200 42 iterations=2



=== TEST 6: FINAL_VAR of a missing variable does not end the loop; of an existing one it does
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = "FINAL_VAR(result)" },
                { content = l.repl("result = 'from a variable'") },
                { content = "Done:\nFINAL_VAR(\"result\")" },
            })
            local res = l.complete(l.ask("go", { context = "x" }))
            ngx.say(res.status, " ", l.answer(res), " iterations=",
                    res.json.rlm.iterations)
            local fed = l.last_message(l.requests("script:root")[2])
            ngx.say(fed:find("FINAL_VAR(result): there is no such variable",
                             1, true) ~= nil)
        }
    }
--- request
GET /t
--- response_body
200 from a variable iterations=3
true



=== TEST 7: FINAL_VAR() called in code ends the loop
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = l.repl("msg = 'via FINAL_VAR()'",
                                   "FINAL_VAR('msg')") },
            })
            local res = l.complete(l.ask("go", { context = "x" }))
            ngx.say(res.status, " ", l.answer(res))
        }
    }
--- request
GET /t
--- response_body
200 via FINAL_VAR()



=== TEST 8: markers switched off: FINAL(...) is just text and the loop goes on
--- config
    location = /off {
        rlm_completions;
        rlm_final_markers off;
    }
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local rlmt = require "rlmt"
            local cjson = require "cjson"
            l.script("root", {
                { content = "FINAL(too early)" },
                { content = l.repl("answer.update(content='from code', ready=True)") },
            })
            local res = rlmt.http("POST", "/off",
                                  cjson.encode(l.ask("go", { context = "x" })))
            ngx.say(res.status, " ", l.answer(res), " iterations=",
                    res.json.rlm.iterations)
            local fed = l.last_message(l.requests("script:root")[2])
            ngx.say(fed:find("You wrote no ```repl block", 1, true) ~= nil)
        }
    }
--- request
GET /t
--- response_body
200 from code iterations=2
true



=== TEST 9: an unclosed block does not run; the model is told
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = "```repl\nimport os\nprint('half" },
                { content = l.repl("answer.update(content='ok', ready=True)") },
            })
            local res = l.complete(l.ask("go", { context = "x" }))
            ngx.say(res.status, " ", l.answer(res), " cells=",
                    res.json.rlm.cells)
            local fed = l.last_message(l.requests("script:root")[2])
            ngx.say(fed:find("was not closed", 1, true) ~= nil)
        }
    }
--- request
GET /t
--- response_body
200 ok cells=1
true



=== TEST 10: long output is cut per block with a marker saying how much
--- http_config
    rlm_output_max 4m;
--- config
    location = /short {
        rlm_completions;
        rlm_block_output_max 100;
    }
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local rlmt = require "rlmt"
            local cjson = require "cjson"
            l.script("root", {
                { content = l.repl("print('y' * 5000)") },
                { content = l.repl("answer.update(content='done', ready=True)") },
            })
            local res = rlmt.http("POST", "/short",
                                  cjson.encode(l.ask("go", { context = "x" })))
            ngx.say(res.status, " ", l.answer(res))
            local fed = l.last_message(l.requests("script:root")[2])
            local ys = fed:match("y+")
            ngx.say(#ys <= 100, " ", fed:match("%[output truncated: %d+ more characters not shown%]") ~= nil)
        }
    }
--- request
GET /t
--- response_body
200 done
true true



=== TEST 11: out of iterations: one last plain call, finish_reason length, the limit named
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = l.repl("print('working')") },
                { content = l.repl("print('still working')") },
                { content = "My best guess is 7." },
            })
            local res = l.complete(l.ask("go", { context = "x",
                                                 rlm = { max_iterations = 2 } }))
            local j = res.json
            ngx.say(res.status, " ", l.answer(res), " ",
                    j.choices[1].finish_reason, " ", j.rlm.limit, " ",
                    j.rlm.iterations)
            local reqs = l.requests("script:root")
            ngx.say("root calls ", #reqs, " last asks: ",
                    l.last_message(reqs[3]):find("no turns left", 1, true)
                    ~= nil)
            ngx.say("turn 2 is the last: ",
                    l.last_message(reqs[2]):find("Turn 2 of 2, the last one",
                                                 1, true) ~= nil)
        }
    }
--- request
GET /t
--- response_body
200 My best guess is 7. length max_iterations 3
root calls 3 last asks: true
turn 2 is the last: true



=== TEST 12: consecutive failing blocks stop the loop (rlm_max_error_cells); code is not the answer
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
                { content = "thinking\n" .. l.repl("1 / 0") },
            })
            local res = rlmt.http("POST", "/strict",
                                  cjson.encode(l.ask("go", { context = "x" })))
            local j = res.json
            ngx.say(res.status, " ", j.choices[1].finish_reason, " ",
                    j.rlm.limit, " cells=", j.rlm.cells, " answer=",
                    l.q(l.answer(res)))
        }
    }
--- request
GET /t
--- response_body
200 length max_error_cells cells=2 answer="thinking"



=== TEST 13: the context from earlier messages when there is no "context" field
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = l.repl(
                    "answer.update(content=repr([m['role'] for m in context])"
                    .. " + ' ' + context[1]['content'], ready=True)") },
            })
            local body = { model = "script:root", messages = {
                { role = "system", content = "be brief" },
                { role = "user", content = { { type = "text", text = "part one" },
                                             { type = "text", text = "part two" } } },
                { role = "assistant", content = "noted" },
                { role = "user", content = "what did I say?" } } }
            local res = l.complete(body)
            ngx.say(res.status, " ", l.q(l.answer(res)))
            local first = l.requests("script:root")[1].req.messages[2].content
            ngx.say(first:find("Query: what did I say?", 1, true) ~= nil, " ",
                    first:find("list of 3 items", 1, true) ~= nil)
        }
    }
--- request
GET /t
--- response_body
200 "['system', 'user', 'assistant'] part one\npart two"
true true



=== TEST 14: max_tokens is a budget on the completion tokens of the whole completion
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local u = { prompt_tokens = 50, completion_tokens = 10,
                        total_tokens = 60 }
            l.script("root", {
                { content = "first " .. l.repl("x = 1"), usage = u },
                { content = "second " .. l.repl("x = 2"), usage = u },
                { content = "third " .. l.repl("x = 3"), usage = u },
            })
            local res = l.complete(l.ask("go", { context = "x",
                                                 max_tokens = 15 }))
            local j = res.json
            ngx.say(res.status, " ", j.choices[1].finish_reason, " ",
                    j.rlm.limit, " ", l.answer(res):sub(1, 6), " ",
                    j.usage.completion_tokens, " iterations ",
                    j.rlm.iterations)
            local sent = l.requests("script:root")[1].req
            ngx.say("not sent to the provider: ", sent.max_tokens == nil)
        }
    }
--- request
GET /t
--- response_body
200 length max_tokens second 20 iterations 2
not sent to the provider: true



=== TEST 15: sampling fields reach the provider with every root call; our own fields do not
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = l.repl("x = 1") },
                { content = "FINAL(done)" },
            })
            local res = l.complete(l.ask("go", { context = "secret context",
                temperature = 0.25, top_p = 0.5, seed = 7, user = "u-1",
                stop = { "###" }, rlm = { max_iterations = 5 } }))
            ngx.say(res.status, " ", l.answer(res))
            for _, r in ipairs(l.requests("script:root")) do
                local q = r.req
                ngx.say(q.temperature, " ", q.top_p, " ", q.seed, " ", q.user,
                        " ", q.stop[1], " rlm=", tostring(q.rlm),
                        " context=", tostring(q.context),
                        " stream=", tostring(q.stream))
            end
        }
    }
--- request
GET /t
--- response_body
200 done
0.25 0.5 7 u-1 ### rlm=nil context=nil stream=nil
0.25 0.5 7 u-1 ### rlm=nil context=nil stream=nil
