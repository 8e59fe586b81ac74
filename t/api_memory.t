# Memory errors keep the session: the sandbox's soft memory limit
# (RLIMIT_DATA, below the cgroup's memory limit) makes a runaway
# allocation or recursion raise MemoryError or RecursionError inside the
# cell; the interpreter lives on with every other variable, and the
# cgroup's OOM kill stays the backstop.  Code cannot lift the limit.

use FindBin;
use lib "$FindBin::Bin/api_lib";
use RlmTest 'no_plan';
use RlmApi;

no_shuffle();
run_tests();

__DATA__

=== TEST 1: the soft limit is set, soft = hard, below the cgroup's limit
--- skip_eval: 1: $ENV{RLM_SANITIZED}
--- http_config
    rlm_sandbox_memory 256m;
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            local r = t.eval(id, table.concat({
                "import resource",
                "soft, hard = resource.getrlimit(resource.RLIMIT_DATA)",
                "print(soft == hard, 0 < soft < 2**62)",
            }, "\n"))
            ngx.print(r.status, " ", r.stdout)
        }
    }
--- request
GET /t
--- response_body
ok True True



=== TEST 2: a balloon, a huge list, a huge bytearray: MemoryError each time, the session and its variables intact
--- skip_eval: 2: $ENV{RLM_SANITIZED}
--- http_config
    rlm_sandbox_memory 256m;
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            t.eval(id, "kept = {'a': [1, 2, 3]}")

            -- grows 16 MiB at a time: without the soft limit the cgroup
            -- kills the sandbox on the way
            local r = t.eval(id, "x = [bytes(16 * 2**20) for _ in range(64)]")
            ngx.say("balloon: ", r.status, " ",
                    tostring(r.error and r.error.ename))

            -- 300 MiB in one piece, above the soft limit, below RLIMIT_AS
            r = t.eval(id, "b = bytearray(300 * 2**20)")
            ngx.say("bytearray: ", r.status, " ",
                    tostring(r.error and r.error.ename))

            r = t.eval(id, "y = [0] * 10**10")
            ngx.say("list: ", r.status, " ",
                    tostring(r.error and r.error.ename))

            t.say_cell("after", t.eval(id, "print(kept, 'x' in globals(), "
                                           .. "'b' in globals())"))
            local s = t.json_http("GET", "/v1/sessions/" .. id).json
            ngx.say("session ", s.status)
        }
    }
--- request
GET /t
--- timeout: 30
--- response_body
balloon: oom MemoryError
bytearray: oom MemoryError
list: oom MemoryError
after: status=ok stdout="{'a': [1, 2, 3]} False False\n"
session active



=== TEST 3: runaway recursion: RecursionError, also when code lifts the limit; the session intact
--- skip_eval: 2: $ENV{RLM_SANITIZED}
--- http_config
    rlm_sandbox_memory 256m;
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            t.eval(id, "kept = 41")

            local r = t.eval(id, "def f(n):\n    return f(n + 1)\nf(0)")
            ngx.say("recursion: ", r.status, " ",
                    tostring(r.error and r.error.ename))

            r = t.eval(id, table.concat({
                "import sys",
                "sys.setrecursionlimit(10**8)",
                "print(sys.getrecursionlimit())",
                "def g(n):",
                "    return [n] + g(n + 1)",
                "g(0)",
            }, "\n"))
            ngx.say("lifted: ", r.status, " ",
                    tostring(r.error and r.error.ename), " ", r.stdout)

            t.say_cell("after", t.eval(id, "print(kept + 1)"))
        }
    }
--- request
GET /t
--- timeout: 30
--- response_body
recursion: error RecursionError
lifted: error RecursionError 10000

after: status=ok stdout="42\n"



=== TEST 4: code cannot lift the soft limit (setrlimit, prlimit), and the next balloon still raises MemoryError
--- skip_eval: 2: $ENV{RLM_SANITIZED}
--- http_config
    rlm_sandbox_memory 256m;
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            local r = t.eval(id, table.concat({
                "import resource",
                "R = resource",
                "soft, hard = R.getrlimit(R.RLIMIT_DATA)",
                "tries = [",
                "    lambda: R.setrlimit(R.RLIMIT_DATA, (hard, hard)),",
                "    lambda: R.setrlimit(R.RLIMIT_DATA,",
                "                        (R.RLIM_INFINITY, R.RLIM_INFINITY)),",
                "    lambda: R.prlimit(0, R.RLIMIT_DATA,",
                "                      (R.RLIM_INFINITY, R.RLIM_INFINITY)),",
                "    lambda: R.setrlimit(R.RLIMIT_DATA, (soft // 2, hard)),",
                "    lambda: R.setrlimit(R.RLIMIT_AS,",
                "                        (R.RLIM_INFINITY, R.RLIM_INFINITY)),",
                "]",
                "for f in tries:",
                "    try:",
                "        f()",
                "        print('changed')",
                "    except (OSError, ValueError) as e:",
                "        print('refused')",
                "print(R.getrlimit(R.RLIMIT_DATA) == (soft, hard))",
            }, "\n"))
            ngx.say(r.status, "\n", r.stdout)

            r = t.eval(id, "x = [bytes(16 * 2**20) for _ in range(64)]")
            ngx.say("balloon: ", r.status, " ",
                    tostring(r.error and r.error.ename))
            t.say_cell("after", t.eval(id, "print('alive')"))
        }
    }
--- request
GET /t
--- timeout: 30
--- response_body
ok
refused
refused
refused
refused
refused
True

balloon: oom MemoryError
after: status=ok stdout="alive\n"
