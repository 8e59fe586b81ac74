-- tamper: what a cell does to escape the sandbox's own time limits, and
-- how t/boundary_limits.t looks for what is left of its sandbox.

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


-- the uid and host pid of a session's sandbox (each sandbox has a uid
-- of its own, so the uid finds every process it made)
function _M.sandbox_uid(id)
    local s = t.json_http("GET", "/v1/sessions/" .. id).json
    local pid = s and s.sandbox and s.sandbox.pid
    if not pid then
        return nil
    end

    local f = io.open("/proc/" .. pid .. "/status")
    if not f then
        return nil
    end

    local text = f:read("*a")
    f:close()

    return tonumber(text:match("\nUid:%s+(%d+)")), pid
end


-- host processes running as uid
function _M.count(uid)
    if not uid then
        return -1
    end

    local p = io.popen("grep -l '^Uid:[[:space:]]*" .. uid
                       .. "[[:space:]]' /proc/[0-9]*/status 2>/dev/null"
                       .. " | wc -l")
    local n = tonumber(p:read("*a"))
    p:close()

    return n or -1
end


-- waits (bounded: 60 s) until uid has no process; the count then
function _M.wait_gone(uid)
    local n
    for _ = 1, 300 do
        n = _M.count(uid)
        if n == 0 then
            return 0
        end
        ngx.sleep(0.2)
    end
    return n
end


return _M
