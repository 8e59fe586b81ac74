# GET /metrics (Prometheus text), GET /healthz (manager reachability) and
# the access-log variables $rlm_session_id, $rlm_cell_status,
# $rlm_sandbox_ms.

use FindBin;
use lib "$FindBin::Bin/api_lib";
use RlmTest 'no_plan';
use RlmApi;

no_shuffle();
run_tests();

__DATA__

=== TEST 1: /metrics is Prometheus text with every family of the API
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local m, res = t.metrics()
            ngx.say(res.status, " ", res.headers["content-type"])
            for _, name in ipairs({
                "rlm_manager_up", "rlm_manager_restarts_total",
                "rlm_pool_size", "rlm_sessions_live", "rlm_sessions_max",
                "rlm_sessions_created_total", "rlm_sessions_deleted_total",
                "rlm_sessions_expired_total",
                'rlm_sessions_rejected_total{reason="limit"}',
                'rlm_cells_total{status="ok"}',
                'rlm_cells_total{status="error"}',
                'rlm_cells_total{status="timeout"}',
                'rlm_cells_total{status="oom"}',
                'rlm_cells_total{status="output_truncated"}',
                'rlm_cells_total{status="crashed"}',
                'rlm_cells_total{status="sandbox_lost"}',
                'rlm_cells_rejected_total{reason="queue_full"}',
                'rlm_cell_turns_total{by="wake"}',
                'rlm_cell_turns_total{by="poll"}',
                'rlm_sandbox_connections_total{how="new"}',
                'rlm_sandbox_connections_total{how="reused"}',
                'rlm_cell_duration_seconds_bucket{le="0.001"}',
                'rlm_cell_duration_seconds_bucket{le="+Inf"}',
                "rlm_cell_duration_seconds_sum",
                "rlm_cell_duration_seconds_count",
                "rlm_sandbox_starts_total",
                'rlm_sandbox_deaths_total{reason="oom"}',
                'rlm_sandbox_deaths_total{reason="crashed"}',
                "rlm_context_loads_total", "rlm_context_bytes_total",
            }) do
                if m[name] == nil then
                    ngx.say("missing: ", name)
                end
            end
            -- every sample has a # TYPE line for its family
            local typed = {}
            for fam in res.body:gmatch("# TYPE (%S+) %a+") do
                typed[fam] = true
            end
            local untyped = 0
            for name in pairs(m) do
                local fam = name:match("^[%w_]+")
                local base = fam:gsub("_bucket$", ""):gsub("_sum$", ""):gsub("_count$", "")
                if not typed[fam] and not typed[base] then
                    untyped = untyped + 1
                end
            end
            ngx.say("samples without # TYPE: ", untyped)
            ngx.say("manager up: ", m["rlm_manager_up"], " live: ",
                    m["rlm_sessions_live"])
        }
    }
--- request
GET /t
--- response_body_like chomp
^200 text/plain; version=0\.0\.4(; charset=utf-8)?
samples without # TYPE: 0
manager up: 1 live: 0
$



=== TEST 2: counters move with the work done
--- http_config
    rlm_cell_timeout 2s;
    rlm_output_max 1k;
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local before = t.metrics()
            local id = t.create()
            t.eval(id, "x = 1")
            t.eval(id, "x = 2")
            t.eval(id, "1/0")
            t.eval(id, "import time\ntime.sleep(30)", { timeout = 1 })
            t.eval(id, "print('a' * 5000)")
            t.http("PUT", "/v1/sessions/" .. id .. "/context", "12345",
                   { ["Content-Type"] = "text/plain" })
            local other = t.create()
            t.eval(other, "import os\nos.abort()")
            t.eval(other, "1")
            local mid = t.metrics()
            t.delete(id)
            t.delete(other)
            local after = t.metrics()
            local function d(name, m)
                return (m[name] or 0) - (before[name] or 0)
            end
            for _, name in ipairs({
                "rlm_sessions_created_total",
                'rlm_cells_total{status="ok"}',
                'rlm_cells_total{status="error"}',
                'rlm_cells_total{status="timeout"}',
                'rlm_cells_total{status="output_truncated"}',
                'rlm_cells_total{status="crashed"}',
                'rlm_cells_total{status="sandbox_lost"}',
                "rlm_context_loads_total",
                "rlm_context_bytes_total",
                'rlm_sandbox_deaths_total{reason="crashed"}',
            }) do
                ngx.say(name, " +", d(name, mid))
            end
            -- the cell refused as sandbox_lost may or may not be timed
            local n = d("rlm_cell_duration_seconds_count", mid)
            ngx.say("cells timed: ", n == 6 or n == 7)
            ngx.say("live while running: +", d("rlm_sessions_live", mid))
            ngx.say("live after deletes: +", d("rlm_sessions_live", after))
            ngx.say("deleted: +", d("rlm_sessions_deleted_total", after))
            ngx.say("sum grew: ", d("rlm_cell_duration_seconds_sum", mid) > 0)
            ngx.say("+Inf bucket = count: ",
                    mid['rlm_cell_duration_seconds_bucket{le="+Inf"}']
                    == mid["rlm_cell_duration_seconds_count"])
            ngx.say("buckets cumulative: ",
                    mid['rlm_cell_duration_seconds_bucket{le="0.001"}']
                    <= mid['rlm_cell_duration_seconds_bucket{le="1"}'])
            -- the two sandboxes taken from the warm pool are replaced
            local grew = false
            for i = 1, 50 do
                if d("rlm_sandbox_starts_total", t.metrics()) >= 2 then
                    grew = true
                    break
                end
                ngx.sleep(0.1)
            end
            ngx.say("sandbox starts grew: ", grew)
        }
    }
--- request
GET /t
--- response_body
rlm_sessions_created_total +2
rlm_cells_total{status="ok"} +2
rlm_cells_total{status="error"} +1
rlm_cells_total{status="timeout"} +1
rlm_cells_total{status="output_truncated"} +1
rlm_cells_total{status="crashed"} +1
rlm_cells_total{status="sandbox_lost"} +1
rlm_context_loads_total +1
rlm_context_bytes_total +5
rlm_sandbox_deaths_total{reason="crashed"} +1
cells timed: true
live while running: +2
live after deletes: +0
deleted: +2
sum grew: true
+Inf bucket = count: true
buckets cumulative: true
sandbox starts grew: true



=== TEST 3: /healthz: manager reachable
--- request
GET /healthz
--- response_body_like chomp
^\{(?=.*"status":"ok")(?=.*"manager":"reachable").*\}\s*$



=== TEST 4: /healthz and the API when the manager socket is unreachable
--- http_config
    rlm_sandboxd_socket /nonexistent/rlm/control.sock;
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local r = t.http("GET", "/healthz")
            ngx.say("healthz: ", r.status, " ", r.json.status, " ", r.json.manager)
            r = t.http("POST", "/v1/sessions", "")
            ngx.say("create: ", t.envelope(r), " retry-after=",
                    tostring(r.headers["retry-after"] ~= nil))
            local m = t.metrics()
            ngx.say("rlm_manager_up ", m["rlm_manager_up"])
        }
    }
--- request
GET /t
--- response_body
healthz: 503 degraded unreachable
create: 503 manager_unavailable server_error retry-after=true
rlm_manager_up 0
--- no_error_log
[alert]
[emerg]



=== TEST 5: /healthz without any manager configured
--- http_config
    # no sandboxd
--- request
GET /healthz
--- response_body_like chomp
"manager":"not_configured"



=== TEST 6: access log variables
--- http_config
    log_format rlm '$request_method $uri sid=$rlm_session_id status=$rlm_cell_status ms=$rlm_sandbox_ms';
--- config
    location /logged/ {
        access_log logs/rlm_access.log rlm;
        rlm_sessions_api;
    }
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local r = t.http("POST", "/logged/v1/sessions", "")
            local id = r.json.id
            t.http("POST", "/logged/v1/sessions/" .. id .. "/eval", '{"code": "x = 1"}')
            t.http("POST", "/logged/v1/sessions/" .. id .. "/eval", '{"code": "1/0"}')
            t.http("GET", "/logged/v1/sessions")
            local lines
            for i = 1, 50 do
                local f = io.open(ngx.config.prefix() .. "logs/rlm_access.log")
                local data = f and f:read("*a") or ""
                if f then f:close() end
                lines = {}
                for l in data:gmatch("[^\n]+") do lines[#lines + 1] = l end
                if #lines >= 4 then break end
                ngx.sleep(0.1)
            end
            for _, l in ipairs(lines) do
                local head, ms = l:match("^(.-) ms=(.*)$")
                head = head:gsub(id, "<ID>")
                if head:find("/eval", 1, true) then
                    -- a number of ms with 3 decimals for a cell
                    head = head .. (ms:match("^%d+%.%d%d%d$") and " ms=<MS>"
                                    or (" ms=" .. ms))
                end
                ngx.say(head)
            end
        }
    }
--- request
GET /t
--- response_body
POST /logged/v1/sessions sid=<ID> status=
POST /logged/v1/sessions/<ID>/eval sid=<ID> status=ok ms=<MS>
POST /logged/v1/sessions/<ID>/eval sid=<ID> status=error ms=<MS>
GET /logged/v1/sessions sid= status=



=== TEST 7: cells of a session reuse the worker's idle sandbox connection
Six cells in a row: each worker connects to the sandbox once, later cells
take the idle connection (at most 2 workers, so at most 2 new ones).  The
namespace carries over, and a deleted session's cached connection does
not break the next session.
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local kn = 'rlm_sandbox_connections_total{how="new"}'
            local kr = 'rlm_sandbox_connections_total{how="reused"}'
            local before = t.metrics()
            local id = t.create()
            t.eval(id, "n = 0")
            for i = 1, 5 do
                t.eval(id, "n += 1")
            end
            t.say_cell("state", t.eval(id, "print(n)"))
            local after = t.metrics()
            local new = after[kn] - before[kn]
            local reused = after[kr] - before[kr]
            ngx.say("exchanges: ", new + reused)
            ngx.say("new at most 2: ", new <= 2 and "yes" or ("no, " .. new))
            t.delete(id)
            local id2 = t.create()
            t.say_cell("next session", t.eval(id2, "print(1 + 1)"))
            t.say_cell("again", t.eval(id2, "print(2 + 2)"))
            t.delete(id2)
        }
    }
--- request
GET /t
--- response_body
state: status=ok stdout="5\n"
exchanges: 7
new at most 2: yes
next session: status=ok stdout="2\n"
again: status=ok stdout="4\n"
