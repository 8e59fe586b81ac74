# Trajectory lines against the reference RLM library's format, field by
# field: an rlm_query entry with the child's own usage and iterations, a
# failed sub-call (empty response, "error"), result.final_answer, the
# per-iteration usage of the root call alone, batches in prompt order.

use FindBin;
use lib "$FindBin::Bin/api_lib";
use lib "$FindBin::Bin/loop_lib";
use RlmTest 'no_plan';
use RlmLoop;

no_shuffle();
run_tests();

__DATA__

=== TEST 1: rlm_query: the child's real usage per model, its run metadata and its own iterations
--- http_config
    rlm_trajectory_dir traj_temp;
    rlm_completion_code_models "script:child script:leaf";
--- config
    location ~ ^/v1/sessions/[^/]+/trajectories(/.*)?$ { rlm_trajectories; }
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = l.repl("r = rlm_query('inner question')",
                                   "answer.update(content='got ' + r,"
                                   .. " ready=True)"),
                  usage = { prompt_tokens = 100, completion_tokens = 10,
                            total_tokens = 110 } },
            })
            l.script("child", {
                { content = l.repl("x = llm_query('leaf', model='script:leaf')",
                                   "print(x)"),
                  usage = { prompt_tokens = 30, completion_tokens = 3,
                            total_tokens = 33 } },
                { content = l.repl("answer.update(content='kid',"
                                   .. " ready=True)"),
                  usage = { prompt_tokens = 40, completion_tokens = 4,
                            total_tokens = 44 } },
            })
            l.script("leaf", { { content = "leaf says",
                                 usage = { prompt_tokens = 7,
                                           completion_tokens = 2,
                                           total_tokens = 9 } } })
            local res = l.complete(l.ask("go", { context = "x",
                                   rlm = { sub_model = "script:child" } }))
            ngx.say(res.status, " ", l.answer(res))
            local t = l.trajectory(res)
            local c = t[2].code_blocks[1].result.rlm_calls[1]
            ngx.say("fn ", c.fn, " model ", c.root_model, " response ",
                    c.response, " error ", tostring(c.error))
            -- the child's two root calls and its own llm_query
            ngx.say("tokens ", c.prompt_tokens, " ", c.completion_tokens)
            local u = c.usage_summary.model_usage_summaries
            local names = {}
            for k, v in pairs(u) do
                names[#names + 1] = k .. "=" .. v.total_calls .. "/"
                                    .. v.total_input_tokens .. "/"
                                    .. v.total_output_tokens
            end
            table.sort(names)
            ngx.say("usage ", table.concat(names, " "))
            local m = c.metadata
            ngx.say("run ", m.run_metadata.root_model, " depth ",
                    m.run_metadata.depth, " env ",
                    m.run_metadata.environment_type, " iterations ",
                    #m.iterations)
            local i1, i2 = m.iterations[1], m.iterations[2]
            ngx.say("child 1: ", i1.type, " ", i1.iteration, " usage ",
                    i1.usage.prompt_tokens, " ", l.q(i1.code_blocks[1]
                    .result.stdout), " sub ",
                    i1.code_blocks[1].result.rlm_calls[1].response)
            ngx.say("child 2: final ", i2.final_answer, " block final ",
                    i2.code_blocks[1].result.final_answer, " prompt[1] ",
                    i2.prompt[1].role)
            ngx.say("root usage ", t[2].usage.prompt_tokens, "/",
                    t[2].usage.completion_tokens, "/",
                    t[2].usage.total_tokens)
        }
    }
--- request
GET /t
--- response_body
200 got kid
fn rlm_query model script:child response kid error nil
tokens 77 9
usage script:child=2/70/7 script:leaf=1/7/2
run script:child depth 1 env ngx_rlm iterations 2
child 1: iteration 1 usage 30 "leaf says\n" sub leaf says
child 2: final kid block final kid prompt[1] system
root usage 100/10/110



=== TEST 2: a failed llm_query: empty response and the message under "error"; a good one has no "error"
--- http_config
    rlm_trajectory_dir traj_temp;
    rlm_completion_code_models "echo script:sub";
--- config
    location ~ ^/v1/sessions/[^/]+/trajectories(/.*)?$ { rlm_trajectories; }
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = l.repl(
                    "ok = llm_query('fine', model='echo')",
                    "try:",
                    "    llm_query('boom')",
                    "except Exception as e:",
                    "    print('raised', type(e).__name__)",
                    "answer.update(content=ok, ready=True)") },
            })
            l.script("sub", { { status = 400, error = "sub model refuses" } })
            local res = l.complete(l.ask("go", { context = "x",
                                   rlm = { sub_model = "script:sub" } }))
            ngx.say(res.status, " ", l.answer(res))
            local t = l.trajectory(res)
            local b = t[2].code_blocks[1].result
            ngx.say("calls ", #b.rlm_calls, " ", l.q(b.stdout))
            local good, bad = b.rlm_calls[1], b.rlm_calls[2]
            ngx.say("good: ", good.response, " error ", tostring(good.error))
            ngx.say("bad: ", l.q(bad.response), " ", bad.fn, " ",
                    bad.root_model, " error has message ",
                    tostring(bad.error):find("sub model refuses", 1, true)
                    ~= nil)
        }
    }
--- request
GET /t
--- response_body
200 echo: fine
calls 2 "raised RuntimeError\n"
good: echo: fine error nil
bad: "" llm_query script:sub error has message true
--- error_log
HTTP 400: sub model refuses



=== TEST 3: result.final_answer on every block; the iteration's usage is its root call's only
--- http_config
    rlm_trajectory_dir traj_temp;
--- config
    location ~ ^/v1/sessions/[^/]+/trajectories(/.*)?$ { rlm_trajectories; }
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local cjson = require "cjson"
            l.script("root", {
                { content = l.repl("r = llm_query('costly')", "print(1)"),
                  usage = { prompt_tokens = 5, completion_tokens = 1,
                            total_tokens = 6 } },
                { content = l.repl("x = 2") .. "\n"
                            .. l.repl("answer.update(content='two',"
                                      .. " ready=True)"),
                  usage = { prompt_tokens = 9, completion_tokens = 2,
                            total_tokens = 11 } },
            })
            l.script("sub", { { content = "s",
                                usage = { prompt_tokens = 500,
                                          completion_tokens = 50,
                                          total_tokens = 550 } } })
            local res = l.complete(l.ask("go", { context = "x",
                                   rlm = { sub_model = "script:sub" } }))
            ngx.say(res.status, " ", l.answer(res), " total ",
                    res.json.usage.total_tokens)
            local t = l.trajectory(res)
            for n = 2, #t do
                local finals = {}
                for _, b in ipairs(t[n].code_blocks) do
                    local f = b.result.final_answer
                    finals[#finals + 1] = f == cjson.null and "null" or f
                end
                ngx.say(t[n].iteration, ": usage ", t[n].usage.prompt_tokens,
                        "/", t[n].usage.completion_tokens, "/",
                        t[n].usage.total_tokens, " finals ",
                        table.concat(finals, ","))
            end
        }
    }
--- request
GET /t
--- response_body
200 two total 567
1: usage 5/1/6 finals null
2: usage 9/2/11 finals null,two



=== TEST 4: llm_query_batched: entries in the prompts' order though the answers come back in reverse
--- http_config
    rlm_trajectory_dir traj_temp;
--- config
    location ~ ^/v1/sessions/[^/]+/trajectories(/.*)?$ { rlm_trajectories; }
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = l.repl(
                    "rs = llm_query_batched(['p0', 'p1', 'p2'])",
                    "one = llm_query('after')",
                    "answer.update(content=','.join(rs), ready=True)") },
            })
            -- all three in flight at once; the first to arrive answers
            -- last, the last first
            l.script("sub", {
                { barrier = 3, latency = 0.6, content = "slow" },
                { barrier = 3, latency = 0.3, content = "mid" },
                { barrier = 3, content = "fast" },
                { content = "later" },
            })
            local res = l.complete(l.ask("go", { context = "x",
                                   rlm = { sub_model = "script:sub" } }))
            ngx.say(res.status)
            local order = {}
            for _, r in ipairs(l.requests("script:sub")) do
                order[#order + 1] = l.last_message(r)
            end
            local t = l.trajectory(res)
            local calls = t[2].code_blocks[1].result.rlm_calls
            local got = {}
            for _, c in ipairs(calls) do
                got[#got + 1] = c.prompt .. ":" .. c.fn
            end
            ngx.say("entries ", table.concat(got, " "))
            -- each entry's response is the one its own prompt got
            local answers = {}
            for i = 1, 3 do
                answers[#answers + 1] = tostring(calls[i].response
                                                 == res.json.choices[1]
                                                    .message.content
                                                    :match(("[^,]*,"):rep(i - 1)
                                                           .. "([^,]*)"))
            end
            ngx.say("matched ", table.concat(answers, " "))
        }
    }
--- request
GET /t
--- response_body
200
entries p0:llm_query_batched p1:llm_query_batched p2:llm_query_batched after:llm_query
matched true true true
