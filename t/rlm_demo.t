# The bundled demo model drives the real loop end to end: it looks at the
# context, searches it in code, asks llm_query() and answers with
# FINAL_VAR - needle in a haystack over the OpenAI endpoint.

use FindBin;
use lib "$FindBin::Bin/api_lib";
use lib "$FindBin::Bin/loop_lib";
use RlmTest 'no_plan';
use RlmLoop;

no_shuffle();
run_tests();

__DATA__

=== TEST 1: needle in 5000 lines, non-stream: four turns, three cells, one sub-call
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local lines = {}
            for i = 1, 5000 do
                lines[i] = "Line " .. i .. ": the weather was unremarkable."
            end
            lines[3141] = "Line 3141: the secret code word is heliotrope."
            local res = l.complete({
                model = "rlm-demo",
                messages = { { role = "user",
                               content = "What is the secret code word?" } },
                context = table.concat(lines, "\n"),
                rlm = { sub_model = "rlm-demo" } })
            local j = res.json
            ngx.say(res.status, " ", l.answer(res))
            ngx.say("iterations ", j.rlm.iterations, " cells ", j.rlm.cells,
                    " calls ", j.rlm.calls, " ", j.choices[1].finish_reason)
            ngx.say("usage adds up: ", j.usage.total_tokens ==
                    j.usage.prompt_tokens + j.usage.completion_tokens
                    and j.usage.prompt_tokens > 0)
        }
    }
--- request
GET /t
--- response_body
200 Line 3141: the secret code word is heliotrope.
iterations 4 cells 3 calls 5 stop
usage adds up: true



=== TEST 2: the same question as a list of chunks, streamed
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local chunks = {}
            for i = 1, 200 do
                chunks[i] = "chunk " .. i .. " says nothing of note"
            end
            chunks[77] = "chunk 77 says the launch date is March 3"
            local res = l.complete({
                model = "rlm-demo", stream = true,
                messages = { { role = "user",
                               content = "When is the launch date?" } },
                context = chunks,
                rlm = { sub_model = "rlm-demo" } })
            local events, comments, done = l.sse(res.body)
            local text = {}
            for _, e in ipairs(events) do
                local d = e.choices and e.choices[1] and e.choices[1].delta
                if d and d.content then text[#text + 1] = d.content end
            end
            ngx.say(res.status, " ", table.concat(text), " done ", done,
                    " progress ", #comments >= 7)
        }
    }
--- request
GET /t
--- response_body
200 chunk 77 says the launch date is March 3 done true progress true



=== TEST 3: twelve completions at once, each with its own needle and session, get their own answers
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local function one(i)
                local lines = {}
                for n = 1, 300 do
                    lines[n] = "line " .. n .. " is filler text"
                end
                lines[100 + i] = "the password for vault " .. i
                                 .. " is swordfish" .. i
                local res = l.complete({
                    model = "rlm-demo",
                    messages = { { role = "user",
                                   content = "What is the password for the vault?" } },
                    context = table.concat(lines, "\n"),
                    rlm = { sub_model = "rlm-demo" } })
                return res.status, l.answer(res),
                       res.headers["x-rlm-session-id"]
            end
            local threads = {}
            for i = 1, 12 do
                threads[i] = ngx.thread.spawn(one, i)
            end
            local right, sessions = 0, {}
            for i = 1, 12 do
                local _, status, answer, sid = ngx.thread.wait(threads[i])
                if status == 200 and answer and answer:find("swordfish" .. i .. "$") then
                    right = right + 1
                end
                sessions[sid or ""] = true
            end
            local n = 0
            for _ in pairs(sessions) do n = n + 1 end
            ngx.say("right ", right, " sessions ", n)
        }
    }
--- request
GET /t
--- timeout: 60
--- response_body
right 12 sessions 12
