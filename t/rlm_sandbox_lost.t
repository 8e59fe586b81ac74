# A completion whose session's sandbox dies while a block runs ends at
# once with the typed sandbox_lost error: no further model calls, the
# OpenAI envelope (non-stream) or an error event (SSE).  The sandbox is
# killed from outside, by its cgroup, as a crash or an operator would.

use FindBin;
use lib "$FindBin::Bin/api_lib";
use lib "$FindBin::Bin/loop_lib";
use RlmTest 'no_plan';
use RlmLoop;

no_shuffle();
run_tests();

__DATA__

=== TEST 1: non-stream: the sandbox killed mid-block gives 502 sandbox_lost after one model call
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local t = require "rlmt"
            local b = require "tamper"

            l.script("root", {
                { content = "wait\n" .. l.repl("import time",
                                               "time.sleep(8)") },
            })

            local id = t.create()
            local cg = b.sandbox_cgroup(id)

            local th = ngx.thread.spawn(function()
                return l.complete(l.ask("go", { context = "x" }),
                                  { ["X-RLM-Session-Id"] = id })
            end)

            -- the model answered and the session is busy: the block runs
            local running = false
            for _ = 1, 200 do
                local s = t.json_http("GET", "/v1/sessions/" .. id).json
                if #l.requests("script:root") >= 1 and s and s.busy then
                    running = true
                    break
                end
                ngx.sleep(0.05)
            end
            ngx.say("block running: ", running)
            ngx.say("killed: ", b.kill(cg) > 0)

            local _, res = ngx.thread.wait(th)
            ngx.say(t.envelope(res))
            local e = type(res.json) == "table" and res.json.error or {}
            ngx.say("why: ", tostring((e.message or ""):match("sandbox "
                                                              .. "is gone")))
            ngx.say("model calls: ", #l.requests("script:root"))

            local s = t.json_http("GET", "/v1/sessions/" .. id).json
            ngx.say("session ", s.status)
        }
    }
--- request
GET /t
--- timeout: 60
--- response_body
block running: true
killed: true
502 sandbox_lost server_error
why: sandbox is gone
model calls: 1
session sandbox_lost
--- no_error_log
[alert]
[emerg]
signal 11



=== TEST 2: stream: the same death ends the stream with a sandbox_lost error event and [DONE]
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local t = require "rlmt"
            local b = require "tamper"

            l.script("root", {
                { content = "wait\n" .. l.repl("import time",
                                               "time.sleep(8)") },
            })

            local id = t.create()
            local cg = b.sandbox_cgroup(id)

            local th = ngx.thread.spawn(function()
                return l.complete(l.ask("go", { context = "x",
                                                stream = true }),
                                  { ["X-RLM-Session-Id"] = id })
            end)

            local running = false
            for _ = 1, 200 do
                local s = t.json_http("GET", "/v1/sessions/" .. id).json
                if #l.requests("script:root") >= 1 and s and s.busy then
                    running = true
                    break
                end
                ngx.sleep(0.05)
            end
            ngx.say("block running: ", running)
            ngx.say("killed: ", b.kill(cg) > 0)

            local _, res = ngx.thread.wait(th)
            local events, _, done = l.sse(res.body)
            local last = events[#events] or {}
            ngx.say(res.status, " error event: ",
                    tostring(last.error and last.error.code), " ",
                    tostring(last.error and last.error.type),
                    " done: ", done)
            ngx.say("model calls: ", #l.requests("script:root"))
        }
    }
--- request
GET /t
--- timeout: 60
--- response_body
block running: true
killed: true
200 error event: sandbox_lost server_error done: true
model calls: 1
--- no_error_log
[alert]
[emerg]
signal 11



=== TEST 3: FINAL_VAR read from a sandbox that died while the model answered: sandbox_lost, no second call
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local t = require "rlmt"
            local b = require "tamper"

            -- the answer takes 2 s: the sandbox is killed meanwhile
            l.script("root", {
                { content = "FINAL_VAR(x)", latency = 2 },
            })

            local id = t.create()
            local cg = b.sandbox_cgroup(id)

            local th = ngx.thread.spawn(function()
                return l.complete(l.ask("go", { context = "x" }),
                                  { ["X-RLM-Session-Id"] = id })
            end)

            local asked = false
            for _ = 1, 200 do
                if #l.requests("script:root") >= 1 then
                    asked = true
                    break
                end
                ngx.sleep(0.05)
            end
            ngx.say("model asked: ", asked)
            ngx.say("killed: ", b.kill(cg) > 0)

            local _, res = ngx.thread.wait(th)
            ngx.say(t.envelope(res))
            ngx.say("model calls: ", #l.requests("script:root"))
        }
    }
--- request
GET /t
--- timeout: 60
--- response_body
model asked: true
killed: true
502 sandbox_lost server_error
model calls: 1
--- no_error_log
[alert]
[emerg]
signal 11
