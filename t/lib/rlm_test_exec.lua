-- Runs a command for a Lua test driver inside ngx.run_worker_thread(), so
-- the worker's event loop stays free (the command may call back into the
-- same nginx).  Debian's lua module has no ngx.pipe.

local _M = {}

function _M.run(cmd)
    local f = io.popen(cmd .. " 2>&1", "r")
    if not f then
        return nil, "popen failed"
    end

    local out = f:read("*a")
    local ok, how, code = f:close()

    return out, ok and "exit 0" or (tostring(how) .. " " .. tostring(code))
end

return _M
