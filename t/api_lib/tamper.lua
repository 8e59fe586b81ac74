-- tamper: what a cell does to escape the sandbox's own time limits, and
-- how t/boundary_limits.t looks for what is left of its sandbox (the
-- processes in its cgroup).

local t = require "rlmt"

local _M = {}


-- what code does first to escape the sandbox's own time limits: block
-- the signals its timers and the host's interrupt use, stop the wall
-- timer; the filter refuses to change their handlers, not to block them
_M.DISARM = table.concat({
    "import signal",
    "signal.pthread_sigmask(signal.SIG_BLOCK,",
    "    {signal.SIGALRM, signal.SIGXCPU, signal.SIGUSR1})",
    "try:",
    "    signal.setitimer(signal.ITIMER_REAL, 0)",
    "except BaseException:",
    "    pass",
    "" }, "\n")

-- then spin, swallowing whatever is raised
_M.SPIN = table.concat({
    "while True:",
    "    try:",
    "        while True:",
    "            pass",
    "    except BaseException:",
    "        pass",
    "" }, "\n")


-- what names a session's sandbox on the host: the line of its pids
-- cgroup in /proc/<pid>/cgroup (one cgroup per sandbox; uids are not
-- unique between managers, and suites run side by side), and its pid
function _M.sandbox_cgroup(id)
    local s = t.json_http("GET", "/v1/sessions/" .. id).json
    local pid = s and s.sandbox and s.sandbox.pid
    if not pid then
        return nil
    end

    local f = io.open("/proc/" .. pid .. "/cgroup")
    if not f then
        return nil
    end

    local text = f:read("*a")
    f:close()

    local line = text:match("(%d+:pids:/[^\n]+)")

    return line, pid
end


-- host processes in that cgroup
function _M.count(line)
    if not line then
        return -1
    end

    local p = io.popen("grep -l -F -x '" .. line .. "' /proc/[0-9]*/cgroup"
                       .. " 2>/dev/null | wc -l")
    local n = tonumber(p:read("*a"))
    p:close()

    return n or -1
end


-- SIGKILL to every host process in that cgroup (what a crash, the OOM
-- killer or an operator does to a sandbox); the number signalled
function _M.kill(line)
    if not line then
        return 0
    end

    local p = io.popen("grep -l -F -x '" .. line .. "' /proc/[0-9]*/cgroup"
                       .. " 2>/dev/null")
    local n = 0
    for path in p:lines() do
        local pid = path:match("^/proc/(%d+)/cgroup$")
        if pid then
            os.execute("kill -9 " .. pid .. " 2>/dev/null")
            n = n + 1
        end
    end
    p:close()

    return n
end


-- waits (bounded: 40 s, within the test client's 60) until the
-- sandbox has no process; the count then
function _M.wait_gone(cg)
    local n
    for _ = 1, 200 do
        n = _M.count(cg)
        if n == 0 then
            return 0
        end
        ngx.sleep(0.2)
    end
    return n
end


return _M
