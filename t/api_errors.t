# Bad input of every kind gets the right 4xx and OpenAI's error envelope
# {"error":{"message","type","param","code"}}; nothing crashes and the
# server keeps working afterwards.

use FindBin;
use lib "$FindBin::Bin/api_lib";
use RlmTest 'no_plan';
use RlmApi;

no_shuffle();
run_tests();

__DATA__

=== TEST 1: malformed JSON on create
--- request
POST /v1/sessions
{"id": 
--- more_headers
Content-Type: application/json
--- error_code: 400
--- response_headers
Content-Type: application/json
--- response_body_like chomp
^\{"error":\{(?=.*"code":"invalid_json")(?=.*"type":"invalid_request_error")(?=.*"param":)(?=.*"message":"[^"]+").*\}\}\s*$



=== TEST 2: unknown session: 404 session_not_found
--- request
GET /v1/sessions/00000000000000000000000000000000
--- error_code: 404
--- response_body_like chomp
"code":"session_not_found"



=== TEST 3: bad id in the URI: 400 invalid_session_id
--- request
GET /v1/sessions/not-a-session
--- error_code: 400
--- response_body_like chomp
"code":"invalid_session_id"



=== TEST 4: wrong method on the collection: 405 with Allow
--- request
PUT /v1/sessions
{}
--- error_code: 405
--- response_headers_like
Allow: .*POST.*
--- response_body_like chomp
"code":"method_not_allowed"



=== TEST 5: unknown route below a session: 404 not_found
--- request
GET /v1/sessions/00000000000000000000000000000000/nothing
--- error_code: 404
--- response_body_like chomp
"code":"not_found"



=== TEST 6: every bad eval/create input, one line each
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            local ev = "/v1/sessions/" .. id .. "/eval"
            local J = "application/json"
            local cases = {
                -- label, method, path, body, content type
                { "create: not JSON", "POST", "/v1/sessions", "{nope", J },
                { "create: array", "POST", "/v1/sessions", "[1]", J },
                { "create: text/plain", "POST", "/v1/sessions", "{}", "text/plain" },
                { "create: id is an object", "POST", "/v1/sessions", '{"id":{}}', J },
                { "eval: not JSON", "POST", ev, '{"code": "x"', J },
                { "eval: empty body", "POST", ev, "", J },
                { "eval: null", "POST", ev, "null", J },
                { "eval: string", "POST", ev, '"print(1)"', J },
                { "eval: no code", "POST", ev, '{"timeout": 1}', J },
                { "eval: code number", "POST", ev, '{"code": 5}', J },
                { "eval: code null", "POST", ev, '{"code": null}', J },
                { "eval: code list", "POST", ev, '{"code": ["x"]}', J },
                { "eval: timeout string", "POST", ev, '{"code": "1", "timeout": "5"}', J },
                { "eval: timeout negative", "POST", ev, '{"code": "1", "timeout": -1}', J },
                { "eval: timeout zero", "POST", ev, '{"code": "1", "timeout": 0}', J },
                { "eval: echo string", "POST", ev, '{"code": "1", "echo": "yes"}', J },
                { "eval: text/plain", "POST", ev, '{"code": "1"}', "text/plain" },
                { "eval: form", "POST", ev, 'code=1', "application/x-www-form-urlencoded" },
                { "eval: GET", "GET", ev, nil, nil },
                { "eval: PUT", "PUT", ev, '{"code": "1"}', J },
                { "eval: bad id", "POST", "/v1/sessions/XYZ/eval", '{"code": "1"}', J },
                { "eval: unknown", "POST", "/v1/sessions/" .. t.id(7) .. "/eval", '{"code": "1"}', J },
                { "session: POST", "POST", "/v1/sessions/" .. id, "{}", J },
                { "session: PATCH", "PATCH", "/v1/sessions/" .. id, "{}", J },
                { "collection: DELETE", "DELETE", "/v1/sessions", nil, nil },
                { "route: unknown tail", "POST", ev .. "/more", '{"code": "1"}', J },
            }
            for _, c in ipairs(cases) do
                local headers = { ["Content-Type"] = c[5] or false }
                local r = t.http(c[2], c[3], c[4], headers)
                local line = c[1] .. ": " .. t.envelope(r)
                if r.status == 405 then
                    line = line .. (r.headers["allow"] and " +Allow" or " no-Allow")
                end
                if r.json and r.json.error and r.json.error.code == "missing_field" then
                    line = line .. " param=" .. tostring(r.json.error.param)
                end
                ngx.say(line)
            end
            local r = t.http("GET", "/v1/sessions")
            ngx.say("sessions: ", #r.json.data)
            t.say_cell("the session still works", t.eval(id, "print('fine')"))
        }
    }
--- request
GET /t
--- response_body
create: not JSON: 400 invalid_json invalid_request_error
create: array: 400 invalid_json invalid_request_error
create: text/plain: 415 unsupported_media_type invalid_request_error
create: id is an object: 400 invalid_type invalid_request_error
eval: not JSON: 400 invalid_json invalid_request_error
eval: empty body: 400 invalid_json invalid_request_error
eval: null: 400 invalid_json invalid_request_error
eval: string: 400 invalid_json invalid_request_error
eval: no code: 400 missing_field invalid_request_error param=code
eval: code number: 400 invalid_type invalid_request_error
eval: code null: 400 invalid_type invalid_request_error
eval: code list: 400 invalid_type invalid_request_error
eval: timeout string: 400 invalid_type invalid_request_error
eval: timeout negative: 400 invalid_type invalid_request_error
eval: timeout zero: 400 invalid_type invalid_request_error
eval: echo string: 400 invalid_type invalid_request_error
eval: text/plain: 415 unsupported_media_type invalid_request_error
eval: form: 415 unsupported_media_type invalid_request_error
eval: GET: 405 method_not_allowed invalid_request_error +Allow
eval: PUT: 405 method_not_allowed invalid_request_error +Allow
eval: bad id: 400 invalid_session_id invalid_request_error
eval: unknown: 404 session_not_found invalid_request_error
session: POST: 405 method_not_allowed invalid_request_error +Allow
session: PATCH: 405 method_not_allowed invalid_request_error +Allow
collection: DELETE: 405 method_not_allowed invalid_request_error +Allow
route: unknown tail: 404 not_found invalid_request_error
sessions: 1
the session still works: status=ok stdout="fine\n"



=== TEST 7: an eval body over 16 MiB: 413 body_too_large, session fine
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            local chunk = string.rep(" ", 1024 * 1024)
            local n, total = 0, 17
            -- {"code": "<17 MiB of spaces>"} is valid JSON, only too big
            local r = t.http("POST", "/v1/sessions/" .. id .. "/eval",
                             function()
                                 if n == 0 then n = 1 return '{"code": "' end
                                 if n <= total then n = n + 1 return chunk end
                                 if n == total + 1 then n = n + 1 return '"}' end
                                 return nil
                             end,
                             { ["Content-Length"] = 10 + total * #chunk + 2 })
            ngx.say("17 MiB: ", t.envelope(r))
            -- chunked: only known to be too large while it is read
            n = 0
            r = t.http("POST", "/v1/sessions/" .. id .. "/eval",
                       function()
                           local piece
                           if n == 0 then piece = '{"code": "'
                           elseif n <= total then piece = chunk
                           elseif n == total + 1 then piece = '"}'
                           elseif n == total + 2 then
                               n = n + 1
                               return "0\r\n\r\n"
                           else return nil end
                           n = n + 1
                           return string.format("%x\r\n", #piece)
                                  .. piece .. "\r\n"
                       end,
                       { ["Transfer-Encoding"] = "chunked" })
            ngx.say("17 MiB chunked: ", t.envelope(r))
            t.say_cell("after", t.eval(id, "print(1)"))
        }
    }
--- request
GET /t
--- response_body
17 MiB: 413 body_too_large invalid_request_error
17 MiB chunked: 413 body_too_large invalid_request_error
after: status=ok stdout="1\n"
--- no_error_log
[alert]
[emerg]



=== TEST 8: garbage and odd requests do not crash the worker
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            local ev = "/v1/sessions/" .. id .. "/eval"
            local odd = {
                '{"code": "\\ud800"}',                       -- lone surrogate
                '{"code": "print(1)", "code": "print(2)"}',  -- duplicate key
                '{"code": "x\\u0000y"}',                      -- NUL in code
                string.rep("[", 100000),                      -- deep nesting
                '{"code": "' .. string.rep("\\\\", 1000) .. '"}',
                "\255\254\000{",                              -- not UTF-8
                '{"code": 1e999}',
            }
            local all_answered = true
            for i, body in ipairs(odd) do
                local r = t.http("POST", ev, body)
                if not r or not r.status or r.status >= 500 then
                    all_answered = false
                    ngx.say("case ", i, ": ", r and r.status or "no answer")
                end
            end
            ngx.say("all answered below 500: ", all_answered)
            t.say_cell("still serving", t.eval(id, "print('up')"))
        }
    }
--- request
GET /t
--- response_body
all answered below 500: true
still serving: status=ok stdout="up\n"
