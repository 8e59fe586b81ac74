# The time limits of a cell hold from outside the sandbox (issue 11, item
# 1).  Each cell first disarms what the sandbox itself would do: it
# blocks SIGALRM, SIGXCPU and SIGUSR1 (the runtime's timers and the
# host's interrupt), stops the wall timer and swallows every exception.
# Only the host's deadline and the manager's CPU watch and kill can end
# it then.  Before them, such a cell got 504 and its sandbox kept burning
# a core; a client that hung up left it burning until the session
# expired.
#
# After each answer the test looks at the host's process table: no
# process of the sandbox's cgroup may be left, so no CPU is burning.

use FindBin;
use lib "$FindBin::Bin/api_lib";
use RlmTest 'no_plan';
use RlmApi;

no_shuffle();
run_tests();

__DATA__

=== TEST 1: a spin with its timers disarmed is killed on its CPU limit
--- http_config
    rlm_cell_cpu_time 1s;
    rlm_cell_timeout 2s;
    lua_shared_dict boundary 1m;
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local b = require "tamper"
            local id = t.create()
            local cg, pid = b.sandbox_cgroup(id)
            ngx.say("sandbox cgroup found: ", cg ~= nil)

            local r, res = t.eval(id, b.DISARM .. b.SPIN)
            ngx.say("http ", res.status, ", cell ", r.status)
            ngx.say("said why: ", (r.error and r.error.evalue or ""):find(
                        "limit", 1, true) ~= nil)

            local s = t.json_http("GET", "/v1/sessions/" .. id).json
            ngx.say("session ", s.status, ", reason ",
                    (s.reason or ""):match("^(%a+)_limit$") and "a limit"
                    or tostring(s.reason))
            ngx.say("processes of the sandbox left: ", b.wait_gone(cg))
        }
    }
--- request
GET /t
--- response_body
sandbox cgroup found: true
http 200, cell timeout
said why: true
session sandbox_lost, reason a limit
processes of the sandbox left: 0
--- error_log eval
qr/lost its sandbox|did not answer in \d+ ms, killing it/
--- no_error_log
[alert]
[emerg]
signal 11



=== TEST 2: a sleep with its wall timer disarmed is killed at the host's deadline
--- http_config
    rlm_cell_cpu_time 5s;
    rlm_cell_timeout 1s;
    lua_shared_dict boundary 1m;
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local b = require "tamper"
            local id = t.create()
            local cg = b.sandbox_cgroup(id)

            local r, res = t.eval(id, b.DISARM
                                      .. "import time\n"
                                      .. "while True:\n"
                                      .. "    try:\n"
                                      .. "        time.sleep(1000)\n"
                                      .. "    except BaseException:\n"
                                      .. "        pass\n")
            ngx.say("http ", res.status, ", cell ", r.status)

            local s = t.json_http("GET", "/v1/sessions/" .. id).json
            ngx.say("session ", s.status, ", reason ", s.reason)
            ngx.say("processes of the sandbox left: ", b.wait_gone(cg))

            -- the session says so to the next cell too
            r = t.eval(id, "x = 1")
            ngx.say("next cell ", r.status)
        }
    }
--- request
GET /t
--- response_body
http 200, cell timeout
session sandbox_lost, reason wall_limit
processes of the sandbox left: 0
next cell sandbox_lost
--- error_log
killing it
--- no_error_log
[alert]
[emerg]
signal 11



=== TEST 3: a client that hangs up does not leave its spin burning
--- http_config
    rlm_cell_cpu_time 1s;
    rlm_cell_timeout 30s;
    lua_shared_dict boundary 1m;
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local b = require "tamper"
            local cjson = require "cjson.safe"
            local id = t.create()
            local cg = b.sandbox_cgroup(id)

            local res, err = t.http("POST", "/v1/sessions/" .. id .. "/eval",
                                    cjson.encode({ code = b.DISARM .. b.SPIN }),
                                    nil, { abort_after = 0.5 })
            ngx.say("client hung up: ", err == "aborted" or res == "aborted")

            -- the cell is still running: nobody waits for it any more
            ngx.say("processes of the sandbox left: ", b.wait_gone(cg))

            local r = t.eval(id, "x = 1")
            ngx.say("next cell ", r.status, ", why: ",
                    (r.error and r.error.evalue or ""):match("cpu_limit")
                    or tostring(r.error and r.error.evalue))
        }
    }
--- request
GET /t
--- response_body
client hung up: true
processes of the sandbox left: 0
next cell sandbox_lost, why: cpu_limit
--- no_error_log
[alert]
[emerg]
signal 11



=== TEST 4: a cell within its limits keeps its session (nothing killed)
--- http_config
    rlm_cell_cpu_time 1s;
    rlm_cell_timeout 2s;
    lua_shared_dict boundary 1m;
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local b = require "tamper"
            local id = t.create()
            local cg = b.sandbox_cgroup(id)

            -- longer than the moment after which the CPU watch starts,
            -- mostly asleep: the watch is taken off when it ends
            local r = t.eval(id, "import time\ntime.sleep(1.5)\nx = 41")
            ngx.say("first ", r.status)

            r = t.eval(id, "x += 1\nprint(x)")
            ngx.say("second ", r.status, " ", r.stdout)

            -- short cells after it use CPU beyond the watch's budget if
            -- it were still on (4 s): 6 cells of 0.8 s
            local all = "ok"
            for i = 1, 6 do
                r = t.eval(id, "import time\nt = time.process_time()\n"
                               .. "while time.process_time() - t < 0.8:\n"
                               .. "    pass\n")
                if r.status ~= "ok" then
                    all = r.status
                end
            end
            ngx.say("cpu cells ", all)

            local s = t.json_http("GET", "/v1/sessions/" .. id).json
            ngx.say("session ", s.status)
            ngx.say("sandbox still there: ", b.count(cg) > 0)
        }
    }
--- request
GET /t
--- response_body
first ok
second ok 42

cpu cells ok
session active
sandbox still there: true
