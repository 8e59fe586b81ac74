# Sessions API: create, list, get, delete, client-chosen ids, owners,
# sandbox release.  Real nginx, real rlm-sandboxd, real CPython.

use FindBin;
use lib "$FindBin::Bin/api_lib";
use RlmTest 'no_plan';
use RlmApi;

no_shuffle();
run_tests();

__DATA__

=== TEST 1: POST /v1/sessions answers 201, a session object and Location
--- request
POST /v1/sessions
--- error_code: 201
--- response_headers_like
Location: (https?://[^/]+)?/v1/sessions/[0-9a-f]{32}
Content-Type: application/json
--- response_body_like chomp
^(?=.*"object":"rlm\.session")\{.*"id":"[0-9a-f]{32}".*\}\s*$



=== TEST 2: lifecycle: create, get, a cell counts, delete, gone
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id, res = t.create()
            local s = res.json
            ngx.say("created: ", res.status, " ", s.object, " ", #id, " ",
                    s.status, " cells=", s.cells, " busy=", tostring(s.busy))
            local loc = res.headers["location"] or ""
            ngx.say("location names it: ",
                    loc:sub(-#("/v1/sessions/" .. id)) == "/v1/sessions/" .. id)
            ngx.say("created is unix seconds: ",
                    type(s.created) == "number"
                    and math.abs(s.created - ngx.time()) < 3600)
            ngx.say("sandbox pid: ", type(s.sandbox) == "table"
                    and type(s.sandbox.pid) == "number" and s.sandbox.pid > 0)

            local r = t.http("GET", "/v1/sessions/" .. id)
            ngx.say("get: ", r.status, " ", r.json.id == id, " ", r.json.object)

            local c = t.eval(id, "x = 1")
            ngx.say("cell: ", c.status)
            r = t.http("GET", "/v1/sessions/" .. id)
            ngx.say("after a cell: cells=", r.json.cells,
                    " usage.cells=", r.json.usage.cells,
                    " busy=", tostring(r.json.busy),
                    " last_used>=created: ", r.json.last_used >= s.created)

            local d = t.delete(id)
            ngx.say("delete: ", d.status, " ", d.json.id == id, " ",
                    d.json.object, " ", tostring(d.json.deleted))

            r = t.http("GET", "/v1/sessions/" .. id)
            ngx.say("get after delete: ", t.envelope(r))
            ngx.say("delete again: ", t.envelope(t.delete(id)))
            local _, er = t.eval(id, "x")
            ngx.say("eval after delete: ", t.envelope(er))
        }
    }
--- request
GET /t
--- response_body
created: 201 rlm.session 32 active cells=0 busy=false
location names it: true
created is unix seconds: true
sandbox pid: true
get: 200 true rlm.session
cell: ok
after a cell: cells=1 usage.cells=1 busy=false last_used>=created: true
delete: 200 true rlm.session true
get after delete: 404 session_not_found invalid_request_error
delete again: 404 session_not_found invalid_request_error
eval after delete: 404 session_not_found invalid_request_error



=== TEST 3: list shows live sessions only, as a list object
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local a = t.create()
            local b = t.create()
            local function ids()
                local r = t.http("GET", "/v1/sessions")
                local seen = {}
                for _, s in ipairs(r.json.data) do
                    seen[s.id] = s.object
                end
                return r, seen
            end
            local r, seen = ids()
            ngx.say("list: ", r.status, " ", r.json.object, " n=",
                    #r.json.data, " a=", tostring(seen[a]),
                    " b=", tostring(seen[b]))
            t.delete(a)
            r, seen = ids()
            ngx.say("after delete: n=", #r.json.data, " a=", tostring(seen[a]),
                    " b=", tostring(seen[b]))
        }
    }
--- request
GET /t
--- response_body
list: 200 list n=2 a=rlm.session b=rlm.session
after delete: n=1 a=nil b=rlm.session



=== TEST 4: client-chosen ids: accepted in the strict format only, once
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = "0123456789abcdef0123456789abcdef"
            local r = t.json_http("POST", "/v1/sessions", { id = id })
            ngx.say("chosen: ", r.status, " ", r.json.id == id)
            r = t.http("GET", "/v1/sessions/" .. id)
            ngx.say("get: ", r.status)
            local c = t.eval(id, "print('hi')")
            ngx.say("eval: ", c.status, " ", t.q(c.stdout))
            r = t.json_http("POST", "/v1/sessions", { id = id })
            ngx.say("again: ", t.envelope(r))
            for _, bad in ipairs({ "0123456789ABCDEF0123456789ABCDEF",
                                   "0123456789abcdef0123456789abcde",
                                   "0123456789abcdef0123456789abcdef0",
                                   "0123456789abcdef0123456789abcdeg",
                                   "../../../../etc/passwd000000000000",
                                   "" })
            do
                r = t.json_http("POST", "/v1/sessions", { id = bad })
                ngx.say("id ", t.q(bad), ": ", t.envelope(r))
            end
            r = t.json_http("POST", "/v1/sessions", { id = 12345 })
            ngx.say("id number: ", t.envelope(r))
            r = t.http("GET", "/v1/sessions")
            ngx.say("sessions after the refusals: ", #r.json.data)
        }
    }
--- request
GET /t
--- response_body
chosen: 201 true
get: 200
eval: ok "hi\n"
again: 409 session_exists invalid_request_error
id "0123456789ABCDEF0123456789ABCDEF": 400 invalid_session_id invalid_request_error
id "0123456789abcdef0123456789abcde": 400 invalid_session_id invalid_request_error
id "0123456789abcdef0123456789abcdef0": 400 invalid_session_id invalid_request_error
id "0123456789abcdef0123456789abcdeg": 400 invalid_session_id invalid_request_error
id "../../../../etc/passwd000000000000": 400 invalid_session_id invalid_request_error
id "": 400 invalid_session_id invalid_request_error
id number: 400 invalid_type invalid_request_error
sessions after the refusals: 1



=== TEST 5: server ids are distinct and random-looking
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local seen, dup, n = {}, false, 8
            local ids = {}
            for i = 1, n do
                local id = t.create()
                if seen[id] then dup = true end
                seen[id] = true
                ids[#ids + 1] = id
            end
            -- no two ids share a 16-digit prefix: not a counter
            local prefixes = {}
            local shared = false
            for _, id in ipairs(ids) do
                local p = id:sub(1, 16)
                if prefixes[p] then shared = true end
                prefixes[p] = true
            end
            ngx.say("distinct: ", not dup, " prefixes distinct: ", not shared)
        }
    }
--- request
GET /t
--- response_body
distinct: true prefixes distinct: true



=== TEST 6: delete releases the sandbox process
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id, res = t.create()
            local pid = res.json.sandbox.pid
            local function alive()
                local f = io.open("/proc/" .. pid .. "/stat")
                if not f then return false end
                local st = f:read("*a")
                f:close()
                -- a zombie is dead too
                return not st:match("^%d+ %b() Z")
            end
            ngx.say("sandbox alive while the session lives: ", alive())
            t.delete(id)
            local gone = false
            for i = 1, 100 do
                if not alive() then gone = true break end
                ngx.sleep(0.1)
            end
            ngx.say("sandbox gone after delete: ", gone)
        }
    }
--- request
GET /t
--- response_body
sandbox alive while the session lives: true
sandbox gone after delete: true



=== TEST 7: owners: another tenant cannot see, use or delete a session
--- config
    # no api locations
    location /v1/sessions {
        rlm_session_owner $http_x_tenant;
        rlm_sessions_api;
    }
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local function as(tenant, method, path, body)
                return t.http(method, path, body,
                              tenant and { ["X-Tenant"] = tenant } or nil)
            end
            local r = as("alice", "POST", "/v1/sessions", "")
            local id = r.json.id
            ngx.say("alice creates: ", r.status, " owner=", tostring(r.json.owner))
            ngx.say("alice gets: ", as("alice", "GET", "/v1/sessions/" .. id).status)
            ngx.say("bob gets: ", t.envelope(as("bob", "GET", "/v1/sessions/" .. id)))
            ngx.say("anonymous gets: ", t.envelope(as(nil, "GET", "/v1/sessions/" .. id)))
            ngx.say("bob evals: ", t.envelope(as("bob", "POST",
                    "/v1/sessions/" .. id .. "/eval", '{"code":"x = 1"}')))
            ngx.say("bob deletes: ", t.envelope(as("bob", "DELETE",
                    "/v1/sessions/" .. id)))
            r = as("bob", "GET", "/v1/sessions")
            ngx.say("bob lists: ", #r.json.data)
            r = as("alice", "GET", "/v1/sessions")
            ngx.say("alice lists: ", #r.json.data)
            r = as("alice", "POST", "/v1/sessions/" .. id .. "/eval",
                   '{"code":"print(40 + 2)"}')
            ngx.say("alice evals: ", r.json.status, " ", t.q(r.json.stdout))
            ngx.say("alice deletes: ", as("alice", "DELETE",
                    "/v1/sessions/" .. id).status)
        }
    }
--- request
GET /t
--- response_body
alice creates: 201 owner=alice
alice gets: 200
bob gets: 404 session_not_found invalid_request_error
anonymous gets: 404 session_not_found invalid_request_error
bob evals: 404 session_not_found invalid_request_error
bob deletes: 404 session_not_found invalid_request_error
bob lists: 0
alice lists: 1
alice evals: ok "42\n"
alice deletes: 200
