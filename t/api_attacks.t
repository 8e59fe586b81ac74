# Sandbox attacks through the HTTP API: each cell really tries the attack;
# the test asserts the outcome is contained (the cell fails or the
# sandbox dies) and that nginx and other sessions are unaffected.

use FindBin;
use lib "$FindBin::Bin/api_lib";
use RlmTest 'no_plan';
use RlmApi;

no_shuffle();
env_to_nginx('RLM_TEST_SECRET=hunter2-secret-key');
run_tests();

__DATA__

=== TEST 1: host files: /etc/shadow, the checkout, /proc of the host
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            -- contained: the cell failed, or it ran without showing the
            -- host's data (a jail may carry its own minimal /etc)
            local function try(label, code, leak)
                local r = t.eval(id, code)
                local leaked = r.status == "ok" and leak
                               and tostring(r.stdout):find(leak, 1, true) ~= nil
                ngx.say(label, ": ", leaked and "LEAKED" or "contained")
                if r.status == "crashed" then id = t.create() end
            end
            local f = io.open("/etc/passwd")
            local host_passwd = f:read("*a")
            f:close()
            local marker = host_passwd:match("\n(_apt:[^\n]*)")
                           or host_passwd:match("([^\n]+)\n?$")
            try("/etc/shadow", "print(open('/etc/shadow').read())", "root:")
            try("/etc/passwd of the host", "print(open('/etc/passwd').read())", marker)
            try("the checkout", "print(open('$TEST_NGINX_RLM_ROOT/Makefile').read())", "ngx_rlm")
            try("nginx config", "print(open('$TEST_NGINX_SERVER_ROOT/conf/nginx.conf').read())", "rlm_sessions_api")
            local w = t.eval(id, "open('/etc/pwned', 'w').write('x')\nprint('wrote')")
            ngx.say("write /etc: ", w.status ~= "ok" and "refused" or "WROTE")
            if w.status == "crashed" then id = t.create() end
            local host_pwned = io.open("/etc/pwned")
            ngx.say("host /etc untouched: ", host_pwned == nil)
            local r = t.eval(id, "import os\nprint(sorted(os.listdir('/proc')))")
            local pids = 0
            for _ in tostring(r.stdout):gmatch("'%d+'") do pids = pids + 1 end
            ngx.say("processes visible in /proc: ", pids <= 3)
            t.say_cell("session fine", t.eval(id, "print('ok')"))
        }
    }
--- request
GET /t
--- response_body
/etc/shadow: contained
/etc/passwd of the host: contained
the checkout: contained
nginx config: contained
write /etc: refused
host /etc untouched: true
processes visible in /proc: true
session fine: status=ok stdout="ok\n"
--- no_error_log
[alert]
[emerg]



=== TEST 2: network: a TCP connection to nginx itself and to the internet fails
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            local port = ngx.var.server_port
            for _, target in ipairs({ "('127.0.0.1', " .. port .. ")",
                                      "('1.1.1.1', 80)" }) do
                local r = t.eval(id, "import socket\ns = socket.socket()\n"
                                 .. "s.settimeout(2)\ns.connect(" .. target .. ")\n"
                                 .. "print('connected')")
                ngx.say(target:gsub(port, "PORT"), ": ",
                        (r.status == "error" or r.status == "crashed") and "blocked" or r.status,
                        tostring(r.stdout):find("connected") and " CONNECTED" or "")
                if r.status == "crashed" then
                    id = t.create()
                end
            end
            ngx.say("healthz: ", t.http("GET", "/healthz").status)
        }
    }
--- request
GET /t
--- response_body
('127.0.0.1', PORT): blocked
('1.1.1.1', 80): blocked
healthz: 200
--- no_error_log
[alert]
[emerg]



=== TEST 3: processes: os.system, subprocess, a bounded fork storm
--- http_config
    rlm_sandbox_pids 16;
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local bystander = t.create()
            t.eval(bystander, "v = 'intact'")
            local id = t.create()
            local r = t.eval(id, "import os\nrc = os.system('id > /tmp/out; cat /etc/passwd')\nprint('rc', rc)")
            ngx.say("os.system: ", (r.status ~= "ok" or not r.stdout:find("rc 0\n", 1, true)) and "failed" or "RAN",
                    tostring(r.stdout):find("uid=") and " LEAKED" or "")
            if r.status == "crashed" then id = t.create() end
            r = t.eval(id, "import subprocess\nprint(subprocess.run(['/bin/cat', '/etc/hostname'], capture_output=True))")
            ngx.say("subprocess: ", r.status ~= "ok" and "failed" or "RAN")
            if r.status == "crashed" then id = t.create() end
            -- linear, at most 200 children that exit on their own: safe
            -- even if the jail were missing
            r = t.eval(id, table.concat({
                "import os, time",
                "n = 0",
                "for i in range(200):",
                "    try:",
                "        pid = os.fork()",
                "    except OSError as e:",
                "        print('fork failed after', n)",
                "        break",
                "    if pid == 0:",
                "        time.sleep(2)",
                "        os._exit(0)",
                "    n += 1",
                "print('forked', n)" }, "\n"), { timeout = 5 })
            local n = tonumber(tostring(r.stdout):match("(%d+)\n$"))
            ngx.say("fork storm: ", (r.status ~= "ok" or (n and n < 16)) and "contained" or ("NOT CONTAINED " .. tostring(r.stdout)))
            t.say_cell("bystander", t.eval(bystander, "print(v)"))
            ngx.say("healthz: ", t.http("GET", "/healthz").status)
        }
    }
--- request
GET /t
--- response_body
os.system: failed
subprocess: failed
fork storm: contained
bystander: status=ok stdout="intact\n"
healthz: 200
--- no_error_log
[alert]
[emerg]



=== TEST 4: memory balloon is contained to its sandbox
--- http_config
    rlm_sandbox_memory 128m;
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local bystander = t.create()
            t.eval(bystander, "v = list(range(5))")
            local id = t.create()
            local r = t.eval(id, "a = []\nwhile True:\n    a.append(b'x' * (64 * 1024 * 1024))")
            ngx.say("balloon: ", r.status)
            r = t.eval(id, "import mmap\nm = mmap.mmap(-1, 4 * 1024 ** 3)\nm[-1] = 1\nm[::4096] = b'y' * (4 * 1024 ** 3 // 4096)")
            ngx.say("mmap balloon: ", (r.status == "oom" or r.status == "error"
                                       or r.status == "sandbox_lost" or r.status == "crashed")
                                      and "contained" or r.status)
            t.say_cell("bystander", t.eval(bystander, "print(sum(v))"))
        }
    }
--- request
GET /t
--- response_body
balloon: oom
mmap balloon: contained
bystander: status=ok stdout="10\n"
--- no_error_log
[alert]
[emerg]



=== TEST 5: nginx's environment (API keys) does not reach the sandbox
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            ngx.say("nginx has it: ", os.getenv("RLM_TEST_SECRET") ~= nil)
            local id = t.create()
            local r = t.eval(id, "import os\nprint(dict(os.environ))\n"
                             .. "try:\n    print(open('/proc/1/environ').read())\nexcept Exception as e:\n    print(e)")
            ngx.say("sandbox sees it: ",
                    tostring(r.stdout):find("hunter2", 1, true) ~= nil)
        }
    }
--- request
GET /t
--- response_body
nginx has it: true
sandbox sees it: false



=== TEST 6: signals: killing nginx from a cell is impossible
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local id = t.create()
            local master = io.open(ngx.config.prefix() .. "logs/nginx.pid"):read("*l")
            local r = t.eval(id, "import os, signal\n"
                             .. "for pid in (" .. master .. ", " .. ngx.worker.pid() .. "):\n"
                             .. "    try:\n        os.kill(pid, signal.SIGKILL)\n"
                             .. "        print('sent', pid)\n"
                             .. "    except Exception as e:\n        print(type(e).__name__)")
            ngx.say("cell: ", r.status == "ok" and "ran" or r.status)
            ngx.say("worker still here: ", ngx.worker.pid() ~= nil)
            ngx.say("master alive: ", io.open("/proc/" .. master .. "/stat") ~= nil)
            ngx.say("healthz: ", t.http("GET", "/healthz").status)
        }
    }
--- request
GET /t
--- response_body_like chomp
^cell: (ran|error|crashed)
worker still here: true
master alive: true
healthz: 200
$
