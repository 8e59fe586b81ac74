# lua/resty/rlm.lua: the Lua bridge over the module's internal location,
# from the rewrite, access and content phases; results as tables, errors
# as nil + "code: message"; the sample endpoint of conf/lua-example.conf.

use FindBin;
use lib "$FindBin::Bin/api_lib";
use RlmTest 'no_plan';
use RlmApi;

no_shuffle();
run_tests();

__DATA__

=== TEST 1: create, get, list, eval, load_context, delete
--- config
    location = /t {
        content_by_lua_block {
            local rlm = require "resty.rlm"
            local q = require("rlmt").q
            local s, err = rlm.session_create()
            ngx.say("create: ", s and s.object, " ", s and rlm.valid_id(s.id), " ", tostring(err))
            local g = rlm.session_get(s.id)
            ngx.say("get: ", g.id == s.id, " ", g.status)
            local l = rlm.session_list()
            ngx.say("list: ", l.object, " ", #l.data)
            local r = rlm.eval(s.id, "x = 20 + 22\nprint(x)")
            ngx.say("eval: ", r.status, " ", q(r.stdout), " cell=", r.cell)
            r = rlm.eval(s.id, "x", { echo = true })
            ngx.say("echo: ", q(r.stdout))
            local c = rlm.load_context(s.id, { items = { 1, 2, 3 } })
            ngx.say("context table: ", c.kind, " ", c.name)
            r = rlm.eval(s.id, "print(sum(context['items']))")
            ngx.say("seen: ", q(r.stdout))
            c = rlm.load_context(s.id, "plain text")
            ngx.say("context string: ", c.kind, " bytes=", c.bytes)
            c = rlm.load_context(s.id, '{"a": 1}', { format = "json", name = "context_1" })
            ngx.say("json string as context_1: ", c.kind, " ", c.name)
            c = rlm.load_context(s.id, 12.5)
            r = rlm.eval(s.id, "print(repr(context), context_1['a'])")
            ngx.say("seen: ", q(r.stdout))
            local big = string.rep("abcd", 1024 * 1024)
            c = rlm.load_context(s.id, big)
            ngx.say("4 MiB string: ", c.bytes)
            local d = rlm.session_delete(s.id)
            ngx.say("delete: ", d.deleted, " ", d.id == s.id)
            local chosen = string.rep("ab", 16)
            s = rlm.session_create({ id = chosen })
            ngx.say("chosen id: ", s.id == chosen)
        }
    }
--- request
GET /t
--- response_body
create: rlm.session true nil
get: true active
list: list 1
eval: ok "42\n" cell=1
echo: "42\n"
context table: dict context
seen: "6\n"
context string: str bytes=10
json string as context_1: dict context_1
seen: "12.5 1\n"
4 MiB string: 4194304
delete: true true
chosen id: true



=== TEST 2: cell outcomes are tables, not errors
--- config
    location = /t {
        content_by_lua_block {
            local rlm = require "resty.rlm"
            local s = rlm.session_create()
            local r, err = rlm.eval(s.id, "raise KeyError('k')")
            ngx.say("error cell: ", r.status, " ", r.error.ename, " ", tostring(err))
            r, err = rlm.eval(s.id, "import time\ntime.sleep(30)", { timeout = 1 })
            ngx.say("timeout cell: ", r.status, " ", tostring(err))
            r = rlm.eval(s.id, "print('alive')")
            ngx.say("then: ", r.status)
        }
    }
--- request
GET /t
--- response_body
error cell: error KeyError nil
timeout cell: timeout nil
then: ok



=== TEST 3: error paths: nil + "code: message"
--- config
    location = /t {
        content_by_lua_block {
            local rlm = require "resty.rlm"
            local function show(label, res, err)
                ngx.say(label, ": ", tostring(res), " ", tostring(err):match("^[%w_]+:") or tostring(err),
                        (err and #err > #(err:match("^[%w_]+:") or "") + 2) and " +message" or "")
            end
            local unknown = string.rep("0", 32)
            show("get unknown", rlm.session_get(unknown))
            show("delete unknown", rlm.session_delete(unknown))
            show("eval unknown", rlm.eval(unknown, "1"))
            show("context unknown", rlm.load_context(unknown, "x"))
            show("get bad id", rlm.session_get("../../etc"))
            show("get uppercase id", rlm.session_get(string.rep("A", 32)))
            show("get number", rlm.session_get(42))
            show("create bad id", rlm.session_create({ id = "xyz" }))
            show("create opts not a table", rlm.session_create("x"))
            local s = rlm.session_create()
            show("create duplicate", rlm.session_create({ id = s.id }))
            show("eval code number", rlm.eval(s.id, 42))
            show("eval timeout string", rlm.eval(s.id, "1", { timeout = "5" }))
            show("eval timeout zero", rlm.eval(s.id, "1", { timeout = 0 }))
            show("eval timeout NaN", rlm.eval(s.id, "1", { timeout = 0/0 }))
            show("eval echo string", rlm.eval(s.id, "1", { echo = "yes" }))
            show("context function", rlm.load_context(s.id, print))
            show("context nil", rlm.load_context(s.id, nil))
            show("context bad format", rlm.load_context(s.id, "x", { format = "xml" }))
            show("context table as text", rlm.load_context(s.id, {}, { format = "text" }))
            show("context bad name", rlm.load_context(s.id, "x", { name = "a-b" }))
            show("context invalid json", rlm.load_context(s.id, "{", { format = "json" }))
            show("owner not a string", rlm.session_get(s.id, { owner = 5 }))
            show("configure bad prefix", rlm.configure({ prefix = "rlm" }))
            rlm.session_delete(s.id)
            show("eval deleted", rlm.eval(s.id, "1"))
            -- answers that are not the module's: no envelope, not JSON
            rlm.configure({ prefix = "/gone" })
            show("no such location", rlm.session_list())
            rlm.configure({ prefix = "/fake" })
            show("not JSON", rlm.session_list())
            rlm.configure({ prefix = "/_rlm" })
            show("back to normal", rlm.session_list() ~= nil)
        }
    }
    location /fake/ {
        internal;
        return 200 "not json";
    }
    location /gone/ {
        internal;
        return 404;
    }
--- request
GET /t
--- response_body
get unknown: nil session_not_found: +message
delete unknown: nil session_not_found: +message
eval unknown: nil session_not_found: +message
context unknown: nil session_not_found: +message
get bad id: nil bad_argument: +message
get uppercase id: nil bad_argument: +message
get number: nil bad_argument: +message
create bad id: nil bad_argument: +message
create opts not a table: nil bad_argument: +message
create duplicate: nil session_exists: +message
eval code number: nil bad_argument: +message
eval timeout string: nil bad_argument: +message
eval timeout zero: nil bad_argument: +message
eval timeout NaN: nil bad_argument: +message
eval echo string: nil bad_argument: +message
context function: nil bad_argument: +message
context nil: nil bad_argument: +message
context bad format: nil bad_argument: +message
context table as text: nil bad_argument: +message
context bad name: nil bad_argument: +message
context invalid json: nil invalid_json: +message
owner not a string: nil bad_argument: +message
configure bad prefix: nil bad_argument: +message
eval deleted: nil session_not_found: +message
no such location: nil http_404: +message
not JSON: nil bad_response: +message
back to normal: true nil



=== TEST 4: rewrite and access phases: a cell decides, content reports
--- config
    location = /t {
        rewrite_by_lua_block {
            local rlm = require "resty.rlm"
            local s = assert(rlm.session_create())
            ngx.ctx.sid = s.id
            local r = assert(rlm.eval(s.id, "limit = 3"))
            ngx.ctx.rewrite = r.status
        }
        access_by_lua_block {
            local rlm = require "resty.rlm"
            local n = #(ngx.var.arg_q or "")
            local r = assert(rlm.eval(ngx.ctx.sid, "print(" .. n .. " <= limit)"))
            if r.stdout ~= "True\n" then
                rlm.session_delete(ngx.ctx.sid)
                return ngx.exit(403)
            end
            ngx.ctx.access = r.status
        }
        content_by_lua_block {
            local rlm = require "resty.rlm"
            local r = rlm.eval(ngx.ctx.sid, "print(limit * 2)")
            rlm.session_delete(ngx.ctx.sid)
            ngx.say(ngx.ctx.rewrite, " ", ngx.ctx.access, " ", r.stdout)
        }
    }
--- request eval
["GET /t?q=ab", "GET /t?q=abcdef"]
--- error_code eval
[200, 403]
--- response_body_like eval
["^ok ok 6\n\$", "403 Forbidden"]



=== TEST 5: the bridge does not block: a slow cell and a fast one overlap
--- config
    location = /t {
        content_by_lua_block {
            local rlm = require "resty.rlm"
            local a = rlm.session_create()
            local b = rlm.session_create()
            local order = {}
            local slow = ngx.thread.spawn(function()
                local r = rlm.eval(a.id, "import time\ntime.sleep(2)\nprint('slow')")
                order[#order + 1] = "slow"
                return r.status
            end)
            local fast = ngx.thread.spawn(function()
                ngx.sleep(0.3)
                local r = rlm.eval(b.id, "print('fast')")
                order[#order + 1] = "fast"
                return r.status
            end)
            local _, s1 = ngx.thread.wait(slow)
            local _, s2 = ngx.thread.wait(fast)
            ngx.say(s1, " ", s2, " order: ", table.concat(order, ","))
        }
    }
--- request
GET /t
--- response_body
ok ok order: fast,slow



=== TEST 6: the internal location is not reachable by clients
--- request
GET /_rlm/sessions
--- error_code: 404



=== TEST 7: owners through the bridge
--- config
    # no api locations
    location /_rlm/ {
        internal;
        rlm_session_owner $rlm_tenant;
        rlm_sessions_api;
    }
    location = /t {
        set $rlm_tenant "";
        content_by_lua_block {
            local rlm = require "resty.rlm"
            local s = assert(rlm.session_create({ owner = "t1" }))
            ngx.say("owner: ", s.owner)
            local g, err = rlm.session_get(s.id, { owner = "t2" })
            ngx.say("t2 get: ", tostring(g), " ", err and err:match("^[%w_]+"))
            g = rlm.session_get(s.id, { owner = "t1" })
            ngx.say("t1 get: ", g.id == s.id)
            local r = rlm.eval(s.id, "print(1)", { owner = "t1" })
            ngx.say("t1 eval: ", r.status)
            local _, e2 = rlm.eval(s.id, "print(1)")
            ngx.say("no owner eval: ", e2 and e2:match("^[%w_]+"))
            ngx.say("t2 list: ", #rlm.session_list({ owner = "t2" }).data)
        }
    }
--- request
GET /t
--- response_body
owner: t1
t2 get: nil session_not_found
t1 get: true
t1 eval: ok
no owner eval: session_not_found
t2 list: 0



=== TEST 8: the sample endpoint of conf/lua-example.conf
--- http_config
    include $TEST_NGINX_RLM_ROOT/conf/policy.conf;
--- config
    include $TEST_NGINX_RLM_ROOT/conf/policy-server.conf;
    include $TEST_NGINX_RLM_ROOT/conf/lua-example.conf;
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local r = t.http("POST", "/lua/run", "print(6 * 7)", { ["Content-Type"] = "text/plain" })
            ngx.say(r.status, " ok=", tostring(r.json.ok), " output=", t.q(r.json.output),
                    " error is null: ", r.json.error == t.null)
            r = t.http("POST", "/lua/run", "print('partial')\n1/0", { ["Content-Type"] = "text/plain" })
            ngx.say(r.status, " ok=", tostring(r.json.ok), " status=", r.json.status,
                    " output=", t.q(r.json.output), " error=", tostring(r.json.error))
            r = t.http("POST", "/lua/run?context=hello%20world",
                       "print(context.upper())", { ["Content-Type"] = "text/plain" })
            ngx.say(r.status, " output=", t.q(r.json.output))
            r = t.http("POST", "/lua/run", "", { ["Content-Type"] = "text/plain" })
            ngx.say(r.status, " ", r.json.error.code)
            r = t.http("GET", "/lua/run")
            ngx.say("GET: ", r.status, " ", tostring(r.headers["allow"]), " ",
                    r.json.error.code)
            r = t.http("GET", "/v1/sessions")
            ngx.say("sessions left behind: ", #r.json.data)
        }
    }
--- request
GET /t
--- response_body
200 ok=true output="42\n" error is null: true
200 ok=false status=error output="partial\n" error=ZeroDivisionError: division by zero
200 output="HELLO WORLD\n"
400 empty_body
GET: 405 POST method_not_allowed
sessions left behind: 0



=== TEST 9: a node of a cluster: a session of another node is a typed error naming the owner
--- http_config
    rlm_node_id 1;
    lua_shared_dict rlm_cluster 1m;
    init_by_lua_block {
        require("rlm.cluster").configure{
            nodes = { [0] = "127.0.0.1:9", [1] = "127.0.0.1:10" },
        }
    }
--- config
    location = /t {
        content_by_lua_block {
            local rlm = require "resty.rlm"
            local there = "00" .. string.rep("5a", 15)
            local r, err = rlm.eval(there, "print(1)")
            ngx.say("eval: ", tostring(r), " ", err)
            r, err = rlm.session_get(there)
            ngx.say("get: ", err:match("^[%w_]+"))
            r, err = rlm.load_context(there, "text")
            ngx.say("context: ", err:match("^[%w_]+"))
            r, err = rlm.session_delete(there)
            ngx.say("delete: ", err:match("^[%w_]+"))
            r, err = rlm.session_create({ id = there })
            ngx.say("create there: ", err:match("^[%w_]+"))
            local s = rlm.session_create()
            ngx.say("made here: ", s.id:sub(1, 2))
            r = rlm.eval(s.id, "print(2)")
            ngx.say("eval here: ", r.status, " ", r.stdout)
            r, err = rlm.eval("07" .. string.rep("5a", 15), "print(3)")
            ngx.say("unknown node: ", err:match("^[%w_]+"))
        }
    }
--- request
GET /t
--- response_body
eval: nil session_on_other_node: session 005a5a5a5a5a5a5a5a5a5a5a5a5a5a5a lives on node 0 (127.0.0.1:9); this node cannot reach it from Lua: send the request to that node, or through its HTTP API, which forwards
get: session_on_other_node
context: session_on_other_node
delete: session_on_other_node
create there: session_on_other_node
made here: 01
eval here: ok 2

unknown node: session_not_found
