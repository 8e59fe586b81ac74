# POST /v1/sessions/{id}/eval: every cell status, persistence across
# cells, error details, the session after each outcome.

use FindBin;
use lib "$FindBin::Bin/api_lib";
use RlmTest 'no_plan';
use RlmApi;

no_shuffle();
run_tests();

__DATA__

=== TEST 1: ok cell: the result object
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            local r, res = t.eval(id, "x = 6 * 7\nprint(x)")
            ngx.say(res.status, " ", res.headers["content-type"])
            ngx.say("object=", r.object, " session=", r.session == id,
                    " cell=", r.cell, " status=", r.status)
            ngx.say("stdout=", t.q(r.stdout), " stderr=", t.q(r.stderr))
            ngx.say("error is null: ", r.error == t.null)
            ngx.say("answer is null: ", r.answer == t.null)
            ngx.say("duration_ms: ", type(r.duration_ms) == "number"
                    and r.duration_ms >= 0)
            r = t.eval(id, "import sys\nsys.stderr.write('warn\\n')")
            ngx.say("cell=", r.cell, " stderr=", t.q(r.stderr),
                    " stdout=", t.q(r.stdout))
        }
    }
--- request
GET /t
--- response_body
200 application/json
object=rlm.cell session=true cell=1 status=ok
stdout="42\n" stderr=""
error is null: true
answer is null: true
duration_ms: true
cell=2 stderr="warn\n" stdout=""



=== TEST 2: state persists across cells: variables, functions, imports
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            t.say_cell("1", t.eval(id, "import json\ndef sq(n):\n    return n * n\nacc = [1]"))
            t.say_cell("2", t.eval(id, "acc.append(sq(3))"))
            t.say_cell("3", t.eval(id, "acc.append(sq(acc[-1]))"))
            t.say_cell("4", t.eval(id, "print(json.dumps(acc))"))
            -- a second session does not see the first one's names
            local other = t.create()
            t.say_cell("other", t.eval(other, "print('acc' in globals())"))
        }
    }
--- request
GET /t
--- response_body
1: status=ok stdout=""
2: status=ok stdout=""
3: status=ok stdout=""
4: status=ok stdout="[1, 9, 81]\n"
other: status=ok stdout="False\n"



=== TEST 3: Python exception: status error, ename/evalue/traceback, state kept
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            t.eval(id, "kept = 'yes'")
            local r = t.eval(id, "print('before')\ndef f():\n    raise ValueError('bad value 7')\nf()")
            ngx.say("status=", r.status, " stdout=", t.q(r.stdout))
            ngx.say("ename=", r.error.ename, " evalue=", r.error.evalue)
            ngx.say("traceback names it: ",
                    type(r.error.traceback) == "string"
                    and r.error.traceback:find("ValueError", 1, true) ~= nil
                    and r.error.traceback:find("in f", 1, true) ~= nil)
            r = t.eval(id, "1/0")
            ngx.say("ename=", r.error.ename, " evalue=", r.error.evalue)
            r = t.eval(id, "def (")
            ngx.say("syntax: status=", r.status, " ename=", r.error.ename)
            r = t.eval(id, "undefined_name")
            ngx.say("name: ", r.error.ename)
            t.say_cell("after", t.eval(id, "print(kept)"))
        }
    }
--- request
GET /t
--- response_body
status=error stdout="before\n"
ename=ValueError evalue=bad value 7
traceback names it: true
ename=ZeroDivisionError evalue=division by zero
syntax: status=error ename=SyntaxError
name: NameError
after: status=ok stdout="yes\n"



=== TEST 4: timeout: a sleeping cell and a spinning cell time out, state kept
--- http_config
    rlm_cell_timeout 3s;
    rlm_cell_cpu_time 3s;
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            local r = t.eval(id, "y = 5\nimport time\ntime.sleep(60)", { timeout = 1 })
            ngx.say("sleep: ", r.status, " ", type(r.error) == "table"
                    and tostring(r.error.ename) or "-")
            t.say_cell("state", t.eval(id, "print(y)"))
            r = t.eval(id, "z = 1\nwhile True:\n    z += 1", { timeout = 1 })
            ngx.say("spin: ", r.status)
            t.say_cell("after spin", t.eval(id, "print(z > 1, y)"))
            -- no timeout given: rlm_cell_timeout applies; a larger one is
            -- capped to it (else this block would outlive its client)
            r = t.eval(id, "import time\ntime.sleep(60)")
            ngx.say("default: ", r.status)
            r = t.eval(id, "import time\ntime.sleep(60)", { timeout = 3600 })
            ngx.say("capped: ", r.status)
            t.say_cell("still usable", t.eval(id, "print('ok')"))
        }
    }
--- request
GET /t
--- timeout: 50
--- response_body
sleep: timeout TimeoutError
state: status=ok stdout="5\n"
spin: timeout
after spin: status=ok stdout="True 5\n"
default: timeout
capped: timeout
still usable: status=ok stdout="ok\n"



=== TEST 5: output beyond rlm_output_max: output_truncated, head kept
--- http_config
    rlm_output_max 1k;
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            local r = t.eval(id, "print('a' * 100000)\nafter = 1")
            ngx.say("status=", r.status)
            ngx.say("kept some: ", #r.stdout > 0 and #r.stdout <= 1024,
                    " head: ", r.stdout:sub(1, 4))
            t.say_cell("cell ran to the end", t.eval(id, "print(after)"))
            r = t.eval(id, "print('b' * 100)")
            ngx.say("under the cap: ", r.status, " ", #r.stdout)
        }
    }
--- request
GET /t
--- response_body
status=output_truncated
kept some: true head: aaaa
cell ran to the end: status=ok stdout="1\n"
under the cap: ok 101



=== TEST 6: MemoryError: status oom, the session stays usable
--- skip_eval: 5: $ENV{RLM_SANITIZED}
--- http_config
    rlm_sandbox_memory 256m;
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            t.eval(id, "small = [1, 2, 3]")
            local r = t.eval(id, "big = bytearray(8 * 1024 ** 3)")
            ngx.say("8 GiB: ", r.status)
            t.say_cell("after", t.eval(id, "print(small, 'big' in globals())"))
        }
    }
--- request
GET /t
--- response_body
8 GiB: oom
after: status=ok stdout="[1, 2, 3] False\n"



=== TEST 7: memory balloon: MemoryError at the soft limit (oom), the session usable (sanitized builds have only the cgroup: maybe sandbox_lost)
--- http_config
    rlm_sandbox_memory 256m;
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            local r = t.eval(id, "a = []\nwhile True:\n    a.append(bytearray(16 * 1024 ** 2))")
            ngx.say("balloon: ", r.status)
            r = t.eval(id, "a = None\nprint('alive')")
            if r.status == "ok" then
                ngx.say("next: ok")
            else
                ngx.say("next: ", r.status, " ", r.error.ename, " ",
                        r.error.evalue:find("oom", 1, true) and "oom" or r.error.evalue)
            end
        }
    }
--- request
GET /t
--- response_body_like eval
$ENV{RLM_SANITIZED}
    ? qr/^balloon: oom\nnext: (ok|sandbox_lost SandboxLost oom)\n$/
    : qr/^balloon: oom\nnext: ok\n$/



=== TEST 8: crash: status crashed, then sandbox_lost; other sessions untouched
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local other = t.create()
            t.eval(other, "z = 7")
            local id = t.create()
            t.eval(id, "w = 1")
            -- a real segfault: C stack overflow in repr() of a deeply
            -- nested list (a raise()d signal would be ignored: the
            -- sandbox is pid 1 of its namespace); the runtime's cap on
            -- the recursion limit is gentle, code can get round it
            local r = t.eval(id, "import sys\n"
                             .. "sys.setrecursionlimit.__globals__"
                             .. "['_set_recursion_limit'](1 << 30)\n"
                             .. "x = []\nfor _ in range(1000000):\n    x = [x]\ns = repr(x)")
            ngx.say("crash: ", r.status)
            r = t.eval(id, "print(w)")
            ngx.say("next: ", r.status, " ", r.error.ename, " ",
                    tostring(r.error.evalue):find("crash", 1, true) and "says crashed"
                    or tostring(r.error.evalue))
            local s = t.http("GET", "/v1/sessions/" .. id)
            ngx.say("session: ", s.status, " ", s.json.status)
            t.say_cell("other session", t.eval(other, "print(z)"))
            ngx.say("delete lost: ", t.delete(id).status)
            local fresh = t.create()
            t.say_cell("fresh session", t.eval(fresh, "print('new')"))
        }
    }
--- request
GET /t
--- response_body
crash: crashed
next: sandbox_lost SandboxLost says crashed
session: 200 sandbox_lost
other session: status=ok stdout="7\n"
delete lost: 200
fresh session: status=ok stdout="new\n"



=== TEST 9: abort() in the interpreter: crashed, then sandbox_lost
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            local r = t.eval(id, "import os\nos.abort()")
            ngx.say("abort: ", r.status)
            r = t.eval(id, "1")
            ngx.say("next: ", r.status)
        }
    }
--- request
GET /t
--- response_body
abort: crashed
next: sandbox_lost



=== TEST 10: echo, answer, unicode, model calls without an engine
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            local r = t.eval(id, "6 * 7", { echo = true })
            ngx.say("echo: ", t.q(r.stdout))
            r = t.eval(id, "6 * 7", { echo = false })
            ngx.say("no echo: ", t.q(r.stdout))
            r = t.eval(id, "answer['content'] = 'done'\nanswer['ready'] = True")
            ngx.say("answer: ", type(r.answer) == "table"
                    and (tostring(r.answer.content) .. " " .. tostring(r.answer.ready))
                    or tostring(r.answer))
            r = t.eval(id, "print('h\u{e9}llo \u{2713}')")
            ngx.say("unicode: ", r.status, " ", r.stdout)
            r = t.eval(id, "llm_query('hi')")
            ngx.say("llm_query: ", r.status, " ", r.error.ename, " ",
                    tostring(r.error.evalue):find("not configured", 1, true) ~= nil)
        }
    }
--- request
GET /t
--- response_body
echo: "42\n"
no echo: ""
answer: done true
unicode: ok héllo ✓

llm_query: error RuntimeError true
