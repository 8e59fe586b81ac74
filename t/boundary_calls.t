# What code may ask of the host, held by the host (design brief, section
# 10): every host action a block can trigger (model calls, batches, child
# loops, sessions, state copies, answers) is capped per completion tree
# and checked against the route's and the tenant's policy before it
# happens; a refusal is an error the code sees, and nothing reaches the
# upstream model or the session table.

use FindBin;
use lib "$FindBin::Bin/api_lib";
use lib "$FindBin::Bin/loop_lib";
use lib "$FindBin::Bin/boundary_lib";
use RlmTest 'no_plan';
use Boundary;

worker_connections(1024);
no_shuffle();
run_tests();

__DATA__

=== TEST 1: llm_query_batched of 300,000 prompts: refused by rlm_batch_max before anything is sent; the worker stays small
--- http_config
    rlm_completion_timeout 60s;
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local b = require "boundary"
            local before = b.rss_kb()
            l.script("root", {
                { content = l.repl(
                    "try:",
                    "    llm_query_batched([''] * 300000)",
                    "    print('BATCH RAN')",
                    "except RuntimeError as e:",
                    "    print('refused:', e)") },
                { content = l.repl("answer.update(content='done', ready=True)") },
            })
            local res = l.complete(l.ask("go", { context = "x",
                                   rlm = { sub_model = "script:sub" } }))
            ngx.say(res.status, " ", l.answer(res))
            local reqs = l.requests()
            ngx.say("upstream requests: ", #reqs, " sub: ",
                    #l.requests("script:sub"))
            local fed = l.last_message(l.requests("script:root")[2])
            ngx.say("fed: ", fed:match("refused: [^\n]*"))
            local peak = b.peak_rss_kb()
            local k = b.mem_scale()
            ngx.say("peak rss under 300 MB: ", peak < 300 * 1024 * k,
                    ", grew under 50 MB: ", peak - before < 50 * 1024 * k)
        }
    }
--- request
GET /t
--- response_body
200 done
upstream requests: 2 sub: 0
fed: refused: too many prompts in one batched call (rlm_batch_max); split the list
peak rss under 300 MB: true, grew under 50 MB: true



=== TEST 2: a 10 MB `state` is refused (rlm_state_max): at the end of a block, and when rlm_query would hand it to a child
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local b = require "boundary"
            l.script("root", {
                { content = l.repl(
                    "state['big'] = 'x' * (10 * 1024 * 1024)",
                    "print('set')") },
                { content = l.repl(
                    "print('keys', sorted(state))",
                    "try:",
                    "    rlm_query('child')",
                    "    print('CHILD RAN')",
                    "except RuntimeError as e:",
                    "    print('refused:', e)",
                    "del state['big']",
                    "state['small'] = 1") },
                { content = l.repl(
                    "r = rlm_query('child')",
                    "answer.update(content=r, ready=True)") },
            })
            l.script("child", {
                { content = l.repl(
                    "answer.update(content='child sees ' + repr(sorted(state)), ready=True)") },
            })
            local res = l.complete(l.ask("go", { context = "x",
                                   rlm = { sub_model = "script:child" } }))
            ngx.say(res.status, " ", l.answer(res))
            local reqs = l.requests("script:root")
            local fed = l.last_message(reqs[2])
            ngx.say("block 1: ", fed:match("%((%a+),"), " ",
                    fed:match("%[error%] [^\n]*"))
            fed = l.last_message(reqs[3])
            ngx.say("block 2: ", fed:match("keys [^\n]*"), " | ",
                    fed:match("refused: [^\n]*"))
            ngx.say("child calls: ", #l.requests("script:child"),
                    ", 10 MB upstream: ", b.upstream_saw(string.rep("x", 4096)))
        }
    }
--- request
GET /t
--- response_body
200 child sees ['small']
block 1: error [error] StateTooLarge: the changes to `state` are larger than the server takes (rlm_state_max); keep large values in variables
block 2: keys ['big'] | refused: the shared `state` would be larger than the server takes (rlm_state_max)
child calls: 1, 10 MB upstream: false



=== TEST 3: a 600 KB `state` shared with 50 children at once: one copy in the worker, not one per child
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local b = require "boundary"
            l.script("root", {
                { content = l.repl(
                    "state['blob'] = 'x' * 600000",
                    "rs = rlm_query_batched(['c%d' % i for i in range(50)])",
                    "answer.update(content=' '.join(sorted(set(rs))), ready=True)") },
            })
            l.script("child", {
                { content = l.repl(
                    "answer.update(content=str(len(state['blob'])), ready=True)") },
            })
            local before = b.rss_kb()
            -- the children wait for their first model answer: by then
            -- each sandbox has been sent the state
            b.gate_close("script:child")
            local co = ngx.thread.spawn(l.complete, l.ask("go", { context = "x",
                                        rlm = { sub_model = "script:child" } }))
            ngx.say("children at the gate: ", b.gate_wait(50, 120))
            local during = b.rss_kb()
            b.gate_open()
            local ok, res = ngx.thread.wait(co)
            ngx.say(res.status, " ", l.answer(res))
            ngx.say("worker grew by less than 16 MB with 50 children: ",
                    during - before < 16 * 1024 * b.mem_scale())
        }
    }
--- request
GET /t
--- timeout: 180
--- response_body
children at the gate: 50
200 600000
worker grew by less than 16 MB with 50 children: true



=== TEST 4: an answer over rlm_answer_max (1m) is the block's AnswerTooLarge error and never the completion's answer
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = l.repl(
                    "answer.update(content='A' * 1100000, ready=True)") },
                { content = l.repl("big = 'B' * 1100000",
                                   "FINAL_VAR('big')") },
                -- the legacy marker names a variable: read by the host
                { content = "FINAL_VAR(big)" },
                -- (answer is still "ready" in the sandbox after the host
                -- refused it: only setting the key captures it again)
                { content = l.repl("FINAL('small')") },
            })
            local res = l.complete(l.ask("go", { context = "x" }))
            ngx.say(res.status, " ", l.answer(res), " ", #res.body < 1024 * 1024)
            local reqs = l.requests("script:root")
            for i = 2, #reqs do
                local fed = l.last_message(reqs[i])
                ngx.say("fed ", i, ": ", fed:match("%[error%] (%a+)")
                        or fed:match("^FINAL_VAR%(big%): [^\n]*")
                        or fed:sub(1, 40))
            end
        }
    }
--- request
GET /t
--- response_body
200 small true
fed 2: AnswerTooLarge
fed 3: AnswerTooLarge
fed 4: FINAL_VAR(big): the value is larger than the server takes (rlm_answer_max); answer with less text.



=== TEST 5: a fan-out of rlm_query_batched holds at most its share of the sessions; another client still gets its sessions
--- http_config
    rlm_max_sessions 40;
    rlm_completion_timeout 120s;
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local b = require "boundary"
            local rlmt = require "rlmt"
            -- 40 sessions, the default share of 25 %: the tree holds 10
            l.script("root", {
                { content = l.repl(
                    "errs = []",
                    "for n in (1100, 100, 50, 10):",
                    "    try:",
                    "        rlm_query_batched(['fan'] * n)",
                    "        errs.append('%d RAN' % n)",
                    "    except RuntimeError as e:",
                    "        errs.append('%d: %s' % (n, str(e).split(';')[0]))",
                    "rs = rlm_query_batched(['fan'] * 9)",
                    "answer.update(content='\\n'.join(errs + [str(len(rs)) + ' ' + rs[0]]), ready=True)") },
            })
            l.script("child", { { content = "FINAL(child done)" } })
            b.gate_close("script:child")
            local co = ngx.thread.spawn(l.complete, l.ask("go", { context = "x",
                                        rlm = { sub_model = "script:child" } }))
            ngx.say("children held: ", b.gate_wait(9, 60))
            local live = rlmt.http("GET", "/v1/sessions").json.data
            ngx.say("sessions of the tree: ", #live)
            -- meanwhile another client creates sessions: the 30 left
            local codes = {}
            for i = 1, 31 do
                local res = rlmt.http("POST", "/v1/sessions", "")
                local c = res.status == 201 and "201"
                          or l.envelope(res):gsub(" server_error", "")
                codes[c] = (codes[c] or 0) + 1
            end
            local keys = {}
            for c in pairs(codes) do
                keys[#keys + 1] = c
            end
            table.sort(keys)
            for _, c in ipairs(keys) do
                ngx.say("second client: ", codes[c], " x ", c)
            end
            b.gate_open()
            local ok, res = ngx.thread.wait(co)
            ngx.say(res.status)
            ngx.say(l.answer(res))
            ngx.say("children started upstream: ", #l.requests("script:child"))
        }
    }
--- request
GET /t
--- response_body
children held: 9
sessions of the tree: 10
second client: 30 x 201
second client: 1 x 503 session_limit
200
1100: too many prompts in one batched call (rlm_batch_max)
100: this completion holds its share of the server's sessions (rlm_completion_sessions_share)
50: this completion holds its share of the server's sessions (rlm_completion_sessions_share)
10: this completion holds its share of the server's sessions (rlm_completion_sessions_share)
9 child done
children started upstream: 9



=== TEST 6: 1,100 children: refused by rlm_completion_sessions_share when the batch cap allows them, and rlm_max_children counts every child the tree starts
--- http_config
    rlm_max_sessions 40;
--- config
    location = /share {
        rlm_completions;
        rlm_batch_max 2000;
        rlm_max_children 2000;
        rlm_completion_sessions_share 25;
    }
    location = /children {
        rlm_completions;
        rlm_max_children 20;
    }
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local rlmt = require "rlmt"
            local cjson = require "cjson"
            local function run(uri, code)
                l.script("root", { { content = l.repl(
                    "out = []",
                    "def fan(n):",
                    "    try:",
                    "        out.append('%d ok %d' % (n, len(rlm_query_batched(['c'] * n))))",
                    "    except RuntimeError as e:",
                    "        out.append('%d: %s' % (n, str(e).split(';')[0]))",
                    code,
                    "answer.update(content=' | '.join(out), ready=True)") } })
                local res = rlmt.http("POST", uri, cjson.encode(
                    l.ask("go", { context = "x",
                                  rlm = { sub_model = "script:child" } })))
                ngx.say(uri, ": ", res.status, " ", l.answer(res))
            end
            l.script("child", { { content = "FINAL(c)" } })
            run("/share", "fan(1100); fan(9)")
            run("/children", "fan(9); fan(9); fan(3); fan(2); fan(1)")
            ngx.say("children upstream: ", #l.requests("script:child"))
            -- none of them is left holding a session
            local n = 0
            for i = 1, 38 do
                if rlmt.http("POST", "/v1/sessions", "").status == 201 then
                    n = n + 1
                end
            end
            ngx.say("sessions for others: ", n)
        }
    }
--- request
GET /t
--- response_body
/share: 200 1100: this completion holds its share of the server's sessions (rlm_completion_sessions_share) | 9 ok 9
/children: 200 9 ok 9 | 9 ok 9 | 3: this completion may start no more child RLMs (rlm_max_children) | 2 ok 2 | 1: this completion may start no more child RLMs (rlm_max_children)
children upstream: 29
sessions for others: 38



=== TEST 7: children that could not get a session do not use up the tree's share
--- http_config
    rlm_max_sessions 40;
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local b = require "boundary"
            local rlmt = require "rlmt"
            -- another client holds 39 of the 40 sessions; the completion
            -- gets the last one, so its children find none
            local others = {}
            for i = 1, 39 do
                others[i] = rlmt.create()
            end
            l.script("root", {
                { content = l.repl(
                    "seen = set()",
                    "for i in range(12):",
                    "    try:",
                    "        rlm_query('c')",
                    "    except RuntimeError as e:",
                    "        seen.add(str(e).split(';')[0])",
                    "print('\\n'.join(sorted(seen)))",
                    "print('FREE' + '-ME')") },
                { content = l.repl(
                    "rs = rlm_query_batched(['c'] * 5)",
                    "answer.update(content=' '.join(rs), ready=True)") },
            })
            l.script("child", { { content = "FINAL(c)" } })
            -- the second turn waits until the other client has let go
            b.gate_close("script:root", "FREE-ME")
            local co = ngx.thread.spawn(l.complete, l.ask("go", { context = "x",
                                        rlm = { sub_model = "script:child" } }))
            ngx.say("turn 2 held: ", b.gate_wait(1, 60))
            for _, id in ipairs(others) do
                rlmt.delete(id)
            end
            b.gate_open()
            local ok, res = ngx.thread.wait(co)
            ngx.say(res.status, " ", l.answer(res))
            local fed = l.last_message(l.requests("script:root")[2])
            ngx.say(fed:match("\n(.-)\nFREE%-ME"))
        }
    }
--- request
GET /t
--- response_body
turn 2 held: 1
200 c c c c c
the session limit (rlm_max_sessions) is reached



=== TEST 8: the tenant's session quota (rlm_session_owner_max) counts the children of its completions
--- config
    location /acme/ {
        rlm_session_owner acme;
        rlm_sessions_api;
    }
    location = /quota {
        set $acme_quota 5;
        rlm_session_owner acme;
        rlm_session_owner_max $acme_quota;
        rlm_completions;
    }
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local b = require "boundary"
            local rlmt = require "rlmt"
            local cjson = require "cjson"
            local function owned()
                return #rlmt.http("GET", "/acme/sessions").json.data
            end
            -- the tenant has 2 sessions; the completion's own makes 3
            rlmt.http("POST", "/acme/sessions", "")
            rlmt.http("POST", "/acme/sessions", "")
            l.script("root", { { content = l.repl(
                "out = []",
                "def fan(n):",
                "    try:",
                "        out.append('%d ok %d' % (n, len(rlm_query_batched(['c'] * n))))",
                "    except RuntimeError as e:",
                "        out.append('%d: %s' % (n, str(e).split(';')[0]))",
                "fan(10); fan(3); fan(2)",
                "for i in range(10):",
                "    try:",
                "        rlm_query('one')",
                "    except RuntimeError as e:",
                "        out.append('one: ' + str(e))",
                "answer.update(content=' | '.join(out), ready=True)") } })
            l.script("child", { { content = "FINAL(c)" } })
            b.gate_close("script:child")
            local co = ngx.thread.spawn(rlmt.http, "POST", "/quota",
                cjson.encode(l.ask("go", { context = "x",
                                           rlm = { sub_model = "script:child" } })))
            ngx.say("children held: ", b.gate_wait(2, 60))
            ngx.say("tenant sessions at the peak: ", owned())
            b.gate_open()
            local ok, res = ngx.thread.wait(co)
            ngx.say(res.status, " ", l.answer(res))
            ngx.say("children upstream: ", #l.requests("script:child"),
                    ", tenant sessions after: ", owned())
        }
    }
--- request
GET /t
--- response_body
children held: 2
tenant sessions at the peak: 5
200 10: the tenant's session quota (max_sessions) leaves no room for these child RLMs | 3: the tenant's session quota (max_sessions) leaves no room for these child RLMs | 2 ok 2
children upstream: 12, tenant sessions after: 3



=== TEST 9: rlm_completion_code_models: code may name only the listed models; the upstream never sees another
--- config
    location = /listed {
        rlm_completions;
        rlm_completion_code_models "cheap other-cheap";
    }
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local b = require "boundary"
            local rlmt = require "rlmt"
            local cjson = require "cjson"
            l.script("root", { { content = l.repl(
                "import json",
                "out = []",
                "def t(label, f):",
                "    try:",
                "        out.append(label + ' ran ' + str(f())[:12])",
                "    except RuntimeError as e:",
                "        out.append(label + ': ' + str(e).split(';')[0])",
                "for m in ('premium', 'made-up-model-7'):",
                "    t('llm_query ' + m, lambda: llm_query('hi', model=m))",
                "    t('llm_query_batched ' + m, lambda: llm_query_batched(['a', 'b'], model=m))",
                "    t('rlm_query ' + m, lambda: rlm_query('hi', model=m))",
                "    t('rlm_query_batched ' + m, lambda: rlm_query_batched(['a'], model=m))",
                -- past the Python wrappers: a call frame of its own
                "_rlm = FINAL.__globals__['_rlm']",
                "rep = json.loads(_rlm.call(json.dumps({'type': 'call', 'id': 4242,"
                .. " 'fn': 'llm_query', 'args': {'prompt': 'raw', 'model': 'premium'}})))",
                "out.append('raw frame premium: ok=%s %s' % (rep['ok'], rep['error'].split(';')[0]))",
                "t('llm_query cheap', lambda: llm_query('hi', model='cheap'))",
                "t('llm_query other-cheap', lambda: llm_query('hi', model='other-cheap'))",
                "t('llm_query default', lambda: llm_query('hi'))",
                "answer.update(content='\\n'.join(out), ready=True)") } })
            local res = rlmt.http("POST", "/listed", cjson.encode(
                l.ask("go", { context = "x", rlm = { sub_model = "echo" } })))
            ngx.say(res.status)
            ngx.say(l.answer(res))
            ngx.say("models upstream: ", table.concat(b.models_seen(), " "))
            ngx.say("premium upstream: ", b.upstream_saw("premium"),
                    ", made-up upstream: ", b.upstream_saw('"made-up-model-7"'))
        }
    }
--- request
GET /t
--- response_body
200
llm_query premium: that model is not available to this request
llm_query_batched premium: that model is not available to this request
rlm_query premium: that model is not available to this request
rlm_query_batched premium: that model is not available to this request
llm_query made-up-model-7: that model is not available to this request
llm_query_batched made-up-model-7: that model is not available to this request
rlm_query made-up-model-7: that model is not available to this request
rlm_query_batched made-up-model-7: that model is not available to this request
raw frame premium: ok=False that model is not available to this request
llm_query cheap ran echo: hi
llm_query other-cheap ran echo: hi
llm_query default ran echo: hi
models upstream: script:root cheap other-cheap echo
premium upstream: false, made-up upstream: false



=== TEST 10: no rlm_completion_code_models: code may name the root and the sub model, nothing else
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local b = require "boundary"
            l.script("root", { { content = l.repl(
                "out = []",
                "def t(label, f):",
                "    try:",
                "        out.append(label + ' ran ' + str(f())[:12])",
                "    except RuntimeError as e:",
                "        out.append(label + ': ' + str(e).split(';')[0])",
                "t('llm_query premium', lambda: llm_query('hi', model='premium'))",
                "t('llm_query_batched premium', lambda: llm_query_batched(['a'], model='premium'))",
                "t('rlm_query premium', lambda: rlm_query('hi', model='premium'))",
                "t('llm_query echo', lambda: llm_query('hi', model='echo'))",
                "t('llm_query script:sub', lambda: llm_query('hi', model='script:sub'))",
                "answer.update(content='\\n'.join(out), ready=True)") },
                { content = "root again" } })
            l.script("sub", { { content = "sub answer" } })
            local res = l.complete(l.ask("go", { context = "x",
                                   rlm = { sub_model = "script:sub" } }))
            ngx.say(res.status)
            ngx.say(l.answer(res))
            ngx.say("models upstream: ", table.concat(b.models_seen(), " "))
        }
    }
--- request
GET /t
--- response_body
200
llm_query premium: that model is not available to this request
llm_query_batched premium: that model is not available to this request
rlm_query premium: that model is not available to this request
llm_query echo: that model is not available to this request
llm_query script:sub ran sub answer
models upstream: script:root script:sub



=== TEST 11: rlm_max_pending_calls caps the model calls code has waiting
--- config
    location = /capped {
        rlm_completions;
        rlm_max_pending_calls 10;
    }
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local rlmt = require "rlmt"
            local cjson = require "cjson"
            l.script("root", { { content = l.repl(
                "out = []",
                "for n in (11, 10):",
                "    try:",
                "        out.append('%d ran %d' % (n, len(llm_query_batched(['p'] * n))))",
                "    except RuntimeError as e:",
                "        out.append('%d: %s' % (n, str(e).split(';')[0]))",
                "answer.update(content=' | '.join(out), ready=True)") } })
            local res = rlmt.http("POST", "/capped", cjson.encode(
                l.ask("go", { context = "x", rlm = { sub_model = "echo" } })))
            ngx.say(res.status, " ", l.answer(res))
            ngx.say("sub calls upstream: ", #l.requests("echo"))
        }
    }
--- request
GET /t
--- response_body
200 11: too many model calls are waiting in this completion (rlm_max_pending_calls) | 10 ran 10
sub calls upstream: 10
