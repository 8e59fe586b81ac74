# Concurrency: cells of one session run one at a time in arrival order;
# different sessions run in parallel; a spinning cell does not hold up
# /healthz or other sessions; the queue limit; client abort mid-cell;
# any worker serves any session.  Assertions are on order and outcome,
# never on elapsed time.

use FindBin;
use lib "$FindBin::Bin/api_lib";
use RlmTest 'no_plan';
use RlmApi;

workers(2);
no_shuffle();
run_tests();

__DATA__

=== TEST 1: cells of one session run in arrival order
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            t.eval(id, "L = []")
            -- subrequests are issued in order; the first cell is slow, so
            -- the others arrive while it runs and must wait their turn
            local reqs = {}
            for i = 0, 5 do
                local code = "L.append(" .. i .. ")"
                if i == 0 then
                    code = "import time\ntime.sleep(0.5)\n" .. code
                end
                reqs[#reqs + 1] = { "/v1/sessions/" .. id .. "/eval",
                                    { method = ngx.HTTP_POST,
                                      body = require("cjson").encode{ code = code } } }
            end
            local res = { ngx.location.capture_multi(reqs) }
            local statuses = {}
            for i, r in ipairs(res) do
                statuses[i] = r.status
            end
            ngx.say("statuses: ", table.concat(statuses, " "))
            t.say_cell("order", t.eval(id, "print(L)"))
        }
    }
--- request
GET /t
--- response_body
statuses: 200 200 200 200 200 200
order: status=ok stdout="[0, 1, 2, 3, 4, 5]\n"



=== TEST 2: concurrent cells of one session never interleave
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            t.eval(id, "import time\nlog = []")
            local threads = {}
            for i = 1, 6 do
                threads[i] = ngx.thread.spawn(function()
                    local r = t.eval(id, "log.append(('start', " .. i .. "))\n"
                                     .. "time.sleep(0.05)\n"
                                     .. "log.append(('end', " .. i .. "))")
                    return r.status
                end)
            end
            local ok_count = 0
            for i = 1, 6 do
                local _, st = ngx.thread.wait(threads[i])
                if st == "ok" then ok_count = ok_count + 1 end
            end
            ngx.say("ok cells: ", ok_count)
            local r = t.eval(id,
                "ok = len(log) == 12 and all(log[k][0] == 'start' and log[k + 1] == ('end', log[k][1]) for k in range(0, 12, 2))\n"
                .. "print(ok, sorted(e[1] for e in log if e[0] == 'start'))")
            ngx.say("well nested: ", (r.stdout:gsub("\n$", "")))
        }
    }
--- request
GET /t
--- response_body
ok cells: 6
well nested: True [1, 2, 3, 4, 5, 6]




=== TEST 3: a spinning cell holds up neither /healthz nor another session
--- http_config
    rlm_cell_timeout 30s;
    rlm_cell_cpu_time 30s;
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local a = t.create()
            local b = t.create()
            local done = {}
            local spin = ngx.thread.spawn(function()
                local r = t.eval(a, "import time\nt0 = time.time()\n"
                                 .. "while time.time() - t0 < 4:\n    pass\n"
                                 .. "print('spun')")
                done[#done + 1] = "A"
                return r
            end)
            ngx.sleep(0.5)   -- let A start spinning
            local h = ngx.thread.spawn(function()
                local r = t.http("GET", "/healthz")
                done[#done + 1] = "healthz"
                return r
            end)
            local other = ngx.thread.spawn(function()
                local r = t.eval(b, "print(2 + 2)")
                done[#done + 1] = "B"
                return r
            end)
            local fresh = ngx.thread.spawn(function()
                local id = t.create()
                local r = t.eval(id, "print('new')")
                done[#done + 1] = "new"
                return r
            end)
            local _, hr = ngx.thread.wait(h)
            local _, br = ngx.thread.wait(other)
            local _, nr = ngx.thread.wait(fresh)
            local _, ar = ngx.thread.wait(spin)
            ngx.say("healthz: ", hr.status)
            t.say_cell("B", br)
            t.say_cell("new session", nr)
            t.say_cell("A", ar)
            ngx.say("finished last: ", done[#done], " (", #done, " done)")
        }
    }
--- request
GET /t
--- response_body
healthz: 200
B: status=ok stdout="4\n"
new session: status=ok stdout="new\n"
A: status=ok stdout="spun\n"
finished last: A (4 done)



=== TEST 4: ten sessions in parallel, each with its own state
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local ids = {}
            for i = 1, 10 do ids[i] = t.create() end
            local th = {}
            for i = 1, 10 do
                th[i] = ngx.thread.spawn(function()
                    t.eval(ids[i], "import time\nv = " .. i .. "\ntime.sleep(0.2)")
                    return t.eval(ids[i], "print(v)").stdout
                end)
            end
            local out = {}
            for i = 1, 10 do
                local _, s = ngx.thread.wait(th[i])
                out[i] = tostring(s):gsub("\n", "")
            end
            ngx.say(table.concat(out, " "))
        }
    }
--- request
GET /t
--- response_body
1 2 3 4 5 6 7 8 9 10



=== TEST 5: queue limit: 429 session_queue_full with Retry-After, then usable
--- http_config
    rlm_session_queue 2;
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            local before = t.metrics()
            local long = ngx.thread.spawn(function()
                return t.eval(id, "import time\ntime.sleep(3)")
            end)
            ngx.sleep(0.5)
            local th = {}
            for i = 1, 5 do
                th[i] = ngx.thread.spawn(function()
                    local _, res = t.eval(id, "n = " .. i)
                    return res
                end)
            end
            local counts, line429 = {}, nil
            for i = 1, 5 do
                local _, res = ngx.thread.wait(th[i])
                counts[res.status] = (counts[res.status] or 0) + 1
                if res.status == 429 then
                    line429 = t.envelope(res) .. " retry-after="
                              .. tostring(res.headers["retry-after"])
                end
            end
            local _, lr = ngx.thread.wait(long)
            ngx.say("long: ", lr.status)
            ngx.say("accepted: ", counts[200] or 0, " refused: ", counts[429] or 0)
            ngx.say(line429)
            t.say_cell("afterwards", t.eval(id, "print('usable')"))
            local after = t.metrics()
            local k = 'rlm_cells_rejected_total{reason="queue_full"}'
            ngx.say("metric: +", (after[k] or 0) - (before[k] or 0))
        }
    }
--- request
GET /t
--- response_body
long: ok
accepted: 2 refused: 3
429 session_queue_full rate_limit_error retry-after=1
afterwards: status=ok stdout="usable\n"
metric: +3



=== TEST 6: client gone mid-cell: the cell finishes, the session stays usable
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            t.eval(id, "done = 0")
            local _, err = t.http("POST", "/v1/sessions/" .. id .. "/eval",
                                  '{"code": "import time\\ntime.sleep(1.5)\\ndone = 1"}',
                                  nil, { abort_after = 0.3 })
            ngx.say("client: ", err)
            -- queued behind the abandoned cell, or run after it
            t.say_cell("next", t.eval(id, "print(done)"))
            local s = t.http("GET", "/v1/sessions/" .. id)
            ngx.say("busy: ", tostring(s.json.busy), " queued: ", tostring(s.json.queued))
            local m = t.metrics()
            ngx.say("live: ", m["rlm_sessions_live"])
        }
    }
--- request
GET /t
--- response_body
client: aborted
next: status=ok stdout="1\n"
busy: false queued: 0
live: 1



=== TEST 7: both workers serve the same session (state in shared memory)
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            t.eval(id, "n = 0")
            local pids, distinct, ok = {}, 0, 0
            for i = 1, 30 do
                -- reuseport spreads new connections over the workers
                local r = t.http("POST", "/v1/sessions/" .. id .. "/eval",
                                 '{"code": "n += 1"}', nil,
                                 { port = $TEST_NGINX_RAND_PORT_1 })
                if r.status == 200 and r.json.status == "ok" then ok = ok + 1 end
                local w = r.headers["x-worker"]
                if w and not pids[w] then
                    pids[w] = true
                    distinct = distinct + 1
                end
            end
            ngx.say("ok: ", ok, " workers: ", distinct)
            t.say_cell("count", t.eval(id, "print(n)"))
        }
    }
--- http_config
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 reuseport;
        add_header X-Worker $pid always;
        location /v1/sessions { rlm_sessions_api; }
    }
--- request
GET /t
--- response_body
ok: 30 workers: 2
count: status=ok stdout="30\n"



=== TEST 8: cells of one session sent through both workers never interleave
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            t.eval(id, "import time\nlog = []")
            local threads, pids = {}, {}
            for i = 1, 8 do
                threads[i] = ngx.thread.spawn(function()
                    local r = t.http("POST", "/v1/sessions/" .. id .. "/eval",
                                     require("cjson").encode{ code =
                                         "log.append(('start', " .. i .. "))\n"
                                         .. "time.sleep(0.05)\n"
                                         .. "log.append(('end', " .. i .. "))" },
                                     nil, { port = $TEST_NGINX_RAND_PORT_1 })
                    return r.status, r.json and r.json.status, r.headers["x-worker"]
                end)
            end
            local ok_count, distinct = 0, 0
            for i = 1, 8 do
                local _, code, st, w = ngx.thread.wait(threads[i])
                if code == 200 and st == "ok" then ok_count = ok_count + 1 end
                if w and not pids[w] then pids[w] = true distinct = distinct + 1 end
            end
            ngx.say("ok cells: ", ok_count, " served by more than one worker: ",
                    distinct > 1 or "maybe not (reuseport hashing)")
            local r = t.eval(id,
                "ok = len(log) == 16 and all(log[k][0] == 'start' and log[k + 1] == ('end', log[k][1]) for k in range(0, 16, 2))\n"
                .. "print(ok, sorted(e[1] for e in log if e[0] == 'start'))")
            ngx.say("well nested: ", (r.stdout:gsub("\n$", "")))
        }
    }
--- http_config
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 reuseport;
        add_header X-Worker $pid always;
        location /v1/sessions { rlm_sessions_api; }
    }
--- request
GET /t
--- response_body_like chomp
^ok cells: 8 served by more than one worker: (true|maybe not \(reuseport hashing\))
well nested: True \[1, 2, 3, 4, 5, 6, 7, 8\]
$



=== TEST 9: cells queued in the worker of the running cell are woken by its end
Five cells wait behind a slow one in the same worker: each turn is handed
over by the end of the cell before it (rlm_cell_turns_total{by="wake"}),
not found by the worker's slow safety poll; order is kept.  One turn may
go to the poll if the machine stalls for most of a second.
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            t.eval(id, "L = []")
            local before = t.metrics()
            local reqs = {}
            for i = 0, 5 do
                local code = "L.append(" .. i .. ")"
                if i == 0 then
                    code = "import time\ntime.sleep(0.2)\n" .. code
                end
                reqs[#reqs + 1] = { "/v1/sessions/" .. id .. "/eval",
                                    { method = ngx.HTTP_POST,
                                      body = require("cjson").encode{ code = code } } }
            end
            local res = { ngx.location.capture_multi(reqs) }
            local statuses = {}
            for i, r in ipairs(res) do
                statuses[i] = r.status
            end
            ngx.say("statuses: ", table.concat(statuses, " "))
            t.say_cell("order", t.eval(id, "print(L)"))
            local after = t.metrics()
            local kw = 'rlm_cell_turns_total{by="wake"}'
            local kp = 'rlm_cell_turns_total{by="poll"}'
            local woken = (after[kw] or 0) - (before[kw] or 0)
            local polled = (after[kp] or 0) - (before[kp] or 0)
            ngx.say("queued turns: ", woken + polled)
            ngx.say("woken: ", woken >= 4 and "yes" or ("no, " .. woken))
        }
    }
--- request
GET /t
--- response_body
statuses: 200 200 200 200 200 200
order: status=ok stdout="[0, 1, 2, 3, 4, 5]\n"
queued turns: 5
woken: yes
