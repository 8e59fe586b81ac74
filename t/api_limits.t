# Limits: rlm_max_sessions answers 503 session_limit with Retry-After
# (never a wait); idle sessions expire and their sandboxes go away.

use FindBin;
use lib "$FindBin::Bin/api_lib";
use RlmTest 'no_plan';
use RlmApi;

no_shuffle();
run_tests();

__DATA__

=== TEST 1: the session limit: 503 session_limit + Retry-After, freed by delete
--- http_config
    rlm_max_sessions 2;
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local a = t.create()
            local b = t.create()
            local r = t.http("POST", "/v1/sessions", "")
            ngx.say("third: ", t.envelope(r), " retry-after=",
                    tostring(r.headers["retry-after"] and
                             r.headers["retry-after"]:match("^%d+$") ~= nil))
            r = t.json_http("POST", "/v1/sessions", { id = t.id(3) })
            ngx.say("third with an id: ", r.status)
            ngx.say("existing still work: ", t.eval(a, "print(1)").status,
                    " ", t.eval(b, "print(2)").status)
            t.delete(a)
            local c = t.http("POST", "/v1/sessions", "")
            ngx.say("after a delete: ", c.status)
            local m = t.metrics()
            ngx.say("rejected: ", m['rlm_sessions_rejected_total{reason="limit"}'],
                    " live: ", m["rlm_sessions_live"], " max: ", m["rlm_sessions_max"])
        }
    }
--- request
GET /t
--- response_body
third: 503 session_limit server_error retry-after=true
third with an id: 503
existing still work: ok ok
after a delete: 201
rejected: 2 live: 2 max: 2



=== TEST 2: idle sessions expire; a session in use does not
--- http_config
    rlm_session_idle_timeout 3s;
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local idle, res = t.create()
            local pid = res.json.sandbox.pid
            local busy = t.create()
            t.eval(busy, "k = 'kept'")
            local expired = false
            for i = 1, 60 do
                ngx.sleep(0.5)
                -- keep `busy` in use well within its idle timeout
                t.eval(busy, "k = k")
                local r = t.http("GET", "/v1/sessions/" .. idle)
                if r.status == 404 then
                    expired = true
                    break
                end
            end
            ngx.say("idle session expired: ", expired)
            local r = t.eval(busy, "print(k)")
            ngx.say("session in use: ", r.status, " ", t.q(r.stdout))
            local _, er = t.eval(idle, "1")
            ngx.say("eval on expired: ", t.envelope(er))
            local gone = false
            for i = 1, 50 do
                local f = io.open("/proc/" .. pid .. "/stat")
                local st = f and f:read("*a")
                if f then f:close() end
                if not st or st:match("^%d+ %b() Z") then gone = true break end
                ngx.sleep(0.1)
            end
            ngx.say("its sandbox is gone: ", gone)
            local m = t.metrics()
            ngx.say("expired metric: ", m["rlm_sessions_expired_total"] >= 1)
        }
    }
--- request
GET /t
--- timeout: 90
--- response_body
idle session expired: true
session in use: ok "kept\n"
eval on expired: 404 session_not_found invalid_request_error
its sandbox is gone: true
expired metric: true



=== TEST 3: one janitor pass expires more than a batch of 16 idle sessions
--- http_config
    rlm_session_idle_timeout 5s;
    rlm_max_sessions 100;
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local ids = {}
            for i = 1, 40 do
                ids[i] = t.create()
            end
            -- expiry counts whole seconds since last use: creating 40
            -- sandboxes can span two of them, so use all 40 again at the
            -- start of one second (a cell each takes well under a second)
            ngx.update_time()
            ngx.sleep(1.001 - ngx.now() % 1)
            for i = 1, 40 do
                t.eval(ids[i], "1")
            end
            -- the first pass that expires anything expires them all (the
            -- idle timeout leaves 5 s to do the above, even under ASan)
            local seen = 0
            for i = 1, 400 do
                seen = t.metrics()["rlm_sessions_expired_total"] or 0
                if seen > 0 then break end
                ngx.sleep(0.05)
            end
            ngx.say("expired in one pass: ", seen)
            ngx.say("left: ", #t.http("GET", "/v1/sessions").json.data)
        }
    }
--- request
GET /t
--- timeout: 60
--- response_body
expired in one pass: 40
left: 0
