# PUT /v1/sessions/{id}/context: JSON values, raw text, other names,
# replacement, a 100 MB body streamed, the size cap.

use FindBin;
use lib "$FindBin::Bin/api_lib";
use RlmTest 'no_plan';
use RlmApi;

no_shuffle();
run_tests();

__DATA__

=== TEST 1: JSON values are decoded into Python objects
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            local function put(body, ctype)
                return t.http("PUT", "/v1/sessions/" .. id .. "/context",
                              body, { ["Content-Type"] = ctype })
            end
            local r = put('{"a": [1, 2, 3], "b": {"c": "d"}}', "application/json")
            ngx.say("dict: ", r.status, " ", r.json.object, " ", r.json.name,
                    " ", r.json.kind, " bytes=", r.json.bytes,
                    " session=", r.json.session == id)
            t.say_cell("dict seen", t.eval(id, "print(type(context).__name__, context['a'][2], context['b']['c'])"))
            r = put('[1, "two", null, true]', "application/json; charset=utf-8")
            ngx.say("list: ", r.status, " ", r.json.kind)
            t.say_cell("list seen", t.eval(id, "print(context)"))
            r = put('"just a string"', "application/vnd.example+json")
            ngx.say("string: ", r.status, " ", r.json.kind)
            t.say_cell("string seen", t.eval(id, "print(repr(context))"))
        }
    }
--- request
GET /t
--- response_body
dict: 200 rlm.context context dict bytes=33 session=true
dict seen: status=ok stdout="dict 3 d\n"
list: 200 list
list seen: status=ok stdout="[1, 'two', None, True]\n"
string: 200 str
string seen: status=ok stdout="'just a string'\n"



=== TEST 2: text content types give a str; format= and name= arguments
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            local base = "/v1/sessions/" .. id .. "/context"
            local r = t.http("PUT", base, '{"not": "parsed"}',
                             { ["Content-Type"] = "text/plain" })
            ngx.say("text: ", r.status, " ", r.json.kind, " bytes=", r.json.bytes)
            t.say_cell("text seen", t.eval(id, "print(type(context).__name__, context)"))
            r = t.http("PUT", base .. "?format=json", '{"k": 1}',
                       { ["Content-Type"] = "text/plain" })
            ngx.say("format=json wins: ", r.status, " ", r.json.kind)
            r = t.http("PUT", base .. "?format=text&name=context_1", "second",
                       { ["Content-Type"] = "text/markdown" })
            ngx.say("name: ", r.status, " ", r.json.name)
            t.say_cell("both", t.eval(id, "print(context['k'], context_1)"))
            r = t.http("POST", base, "via post", { ["Content-Type"] = "text/plain" })
            ngx.say("POST also loads: ", r.status)
            t.say_cell("replaced", t.eval(id, "print(context)"))
            r = t.http("PUT", base .. "?format=yaml", "a: 1",
                       { ["Content-Type"] = "text/plain" })
            ngx.say("bad format: ", t.envelope(r))
            r = t.http("PUT", base .. "?name=1bad", "x",
                       { ["Content-Type"] = "text/plain" })
            ngx.say("bad name: ", t.envelope(r))
            r = t.http("PUT", base .. "?name=__builtins__", "x",
                       { ["Content-Type"] = "text/plain" })
            ngx.say("dunder name: ", r.status >= 400 and r.status < 500)
            t.say_cell("still fine", t.eval(id, "print(len(context))"))
        }
    }
--- request
GET /t
--- response_body
text: 200 str bytes=17
text seen: status=ok stdout="str {"not": "parsed"}\n"
format=json wins: 200 dict
name: 200 context_1
both: status=ok stdout="1 second\n"
POST also loads: 200
replaced: status=ok stdout="via post\n"
bad format: 400 invalid_value invalid_request_error
bad name: 400 invalid_value invalid_request_error
dunder name: true
still fine: status=ok stdout="8\n"



=== TEST 3: bad bodies and media types; the session stays usable
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            local base = "/v1/sessions/" .. id .. "/context"
            t.http("PUT", base, "original", { ["Content-Type"] = "text/plain" })
            local r = t.http("PUT", base, '{"broken": ', { ["Content-Type"] = "application/json" })
            ngx.say("broken json: ", t.envelope(r))
            r = t.http("PUT", base, "\137PNG", { ["Content-Type"] = "image/png" })
            ngx.say("image/png: ", t.envelope(r))
            r = t.http("PUT", base, "x=1", { ["Content-Type"] = "application/x-www-form-urlencoded" })
            ngx.say("form: ", t.envelope(r))
            r = t.http("PUT", "/v1/sessions/" .. t.id(99) .. "/context", "x",
                       { ["Content-Type"] = "text/plain" })
            ngx.say("unknown session: ", t.envelope(r))
            r = t.http("PUT", "/v1/sessions/NOTANID/context", "x",
                       { ["Content-Type"] = "text/plain" })
            ngx.say("bad id: ", t.envelope(r))
            r = t.http("GET", base)
            ngx.say("GET: ", t.envelope(r), " allow=", tostring(r.headers["allow"] ~= nil))
            t.say_cell("context unchanged", t.eval(id, "print(context)"))
        }
    }
--- request
GET /t
--- response_body
broken json: 400 invalid_json invalid_request_error
image/png: 415 unsupported_media_type invalid_request_error
form: 415 unsupported_media_type invalid_request_error
unknown session: 404 session_not_found invalid_request_error
bad id: 400 invalid_session_id invalid_request_error
GET: 405 method_not_allowed invalid_request_error allow=true
context unchanged: status=ok stdout="original\n"



=== TEST 4: a 100 MiB text body is streamed to the sandbox, not held twice
--- http_config
    rlm_sandbox_memory 1024m;
    rlm_context_max_size 200m;
--- config
    # no api locations
    # (Test::Nginx puts client_max_body_size 30M in the server block)
    location /v1/sessions {
        client_max_body_size 200m;
        rlm_sessions_api;
    }
    location = /metrics { rlm_metrics; }
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local function hwm_kb()
                local f = io.open("/proc/self/status")
                local s = f:read("*a")
                f:close()
                return tonumber(s:match("VmHWM:%s*(%d+)"))
            end
            local id = t.create()
            local block = string.rep("0123456789abcdef", 65536)  -- 1 MiB
            local n = 100
            local before = hwm_kb()
            local sent = 0
            local r = t.http("PUT", "/v1/sessions/" .. id .. "/context",
                             function()
                                 if sent == n then return nil end
                                 sent = sent + 1
                                 return block
                             end,
                             { ["Content-Type"] = "text/plain",
                               ["Content-Length"] = n * #block },
                             { timeout = 120000 })
            ngx.say("put: ", r.status, " ", r.json.kind, " bytes=", r.json.bytes)
            local grown_mb = (hwm_kb() - before) / 1024
            ngx.say("worker peak grew by less than the body: ", grown_mb < 100)
            t.say_cell("seen", t.eval(id, "print(len(context), context.count('f0'), context[:4], context[-4:])"))
            local m = t.metrics()
            ngx.say("metrics bytes: ", (m["rlm_context_bytes_total"] or 0) >= n * #block)
        }
    }
--- request
GET /t
--- timeout: 120
--- response_body
put: 200 str bytes=104857600
worker peak grew by less than the body: true
seen: status=ok stdout="104857600 6553599 0123 cdef\n"
metrics bytes: true



=== TEST 5: above rlm_context_max_size: 413 with the envelope, context kept
--- http_config
    rlm_context_max_size 1m;
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            local base = "/v1/sessions/" .. id .. "/context"
            local r = t.http("PUT", base, string.rep("y", 1024 * 1024),
                             { ["Content-Type"] = "text/plain" })
            ngx.say("at the cap: ", r.status)
            local big = string.rep("z", 64 * 1024)
            local left = 32
            r = t.http("PUT", base, function()
                           if left == 0 then return nil end
                           left = left - 1
                           return big
                       end,
                       { ["Content-Type"] = "text/plain",
                         ["Content-Length"] = 32 * #big })
            ngx.say("2 MiB: ", t.envelope(r))
            -- chunked, so the size is only known while reading
            left = 32
            r = t.http("PUT", base, function()
                           if left == 0 then
                               left = -1
                               return "0\r\n\r\n"
                           end
                           if left < 0 then return nil end
                           left = left - 1
                           return string.format("%x\r\n", #big) .. big .. "\r\n"
                       end,
                       { ["Content-Type"] = "text/plain",
                         ["Transfer-Encoding"] = "chunked" })
            ngx.say("2 MiB chunked: ", t.envelope(r))
            t.say_cell("context kept", t.eval(id, "print(len(context), context[:1])"))
        }
    }
--- request
GET /t
--- response_body
at the cap: 200
2 MiB: 413 body_too_large invalid_request_error
2 MiB chunked: 413 body_too_large invalid_request_error
context kept: status=ok stdout="1048576 y\n"
--- no_error_log
[alert]
[emerg]
