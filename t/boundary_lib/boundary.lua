-- boundary: helpers of the trust-boundary suites' Lua drivers
-- (t/boundary_*.t, see Boundary.pm).  Every block runs one nginx worker,
-- so the driver, the completions it starts and the scripted model all
-- live in this Lua VM: a semaphore is enough to hold model requests at
-- the gate until the driver lets them go.

local cjson = require "cjson.safe"
local semaphore = require "ngx.semaphore"

local _M = {}

local gate = {
    model = nil,        -- hold requests for this model ...
    marker = nil,       -- ... (and) whose body has this text
    held = 0,           -- requests held so far
    arrived = semaphore.new(0),
    open = semaphore.new(0),
}


local function body()
    ngx.req.read_body()
    local raw = ngx.req.get_body_data()
    if raw == nil and ngx.req.get_body_file() then
        local f = io.open(ngx.req.get_body_file(), "rb")
        raw = f:read("*a")
        f:close()
    end
    return raw or ""
end


-- content handler of /gate/v1/chat/completions: hold the request if the
-- gate is closed for it, then answer as the scripted model does
function _M.gate_serve()
    if gate.model or gate.marker then
        local raw = body()
        local req = cjson.decode(raw) or {}
        if (gate.model == nil or req.model == gate.model)
           and (gate.marker == nil or raw:find(gate.marker, 1, true))
        then
            gate.held = gate.held + 1
            gate.arrived:post(1)
            gate.open:wait(120)
        end
    end
    return require("mock_llm").serve()
end


-- hold from now on the requests for model (nil: any) whose body
-- contains marker (nil: any)
function _M.gate_close(model, marker)
    gate.model = model
    gate.marker = marker
end


-- wait until n requests are held (or timeout seconds pass); returns how
-- many arrived
function _M.gate_wait(n, timeout)
    local got = 0
    for _ = 1, n do
        if not gate.arrived:wait(timeout or 60) then
            break
        end
        got = got + 1
    end
    return got
end


-- let every held request go, and all later ones pass
function _M.gate_open()
    gate.model = nil
    gate.marker = nil
    gate.open:post(gate.held + 100000)
end


function _M.held()
    return gate.held
end


-- how much wider memory bounds are in this run (8 under valgrind)
function _M.mem_scale()
    return tonumber(ngx.var.boundary_mem_scale) or 1
end


-- this worker's resident set, in KiB
function _M.rss_kb()
    local f = io.open("/proc/self/status")
    local s = f:read("*a")
    f:close()
    return tonumber(s:match("VmRSS:%s*(%d+)"))
end


-- the most this worker was ever resident, in KiB (each block starts a
-- fresh nginx, so: during this block)
function _M.peak_rss_kb()
    local f = io.open("/proc/self/status")
    local s = f:read("*a")
    f:close()
    return tonumber(s:match("VmHWM:%s*(%d+)"))
end


-- Python for a cell: rebinds the sandbox runtime's frame encoder
-- (rlm_repl._encode, which dispatch() calls for every result) to one
-- that sends the bytes of FORGE, once, instead of the real result.
-- Code can do this to its own runtime; the host must not care.
_M.HOOK = table.concat({
    "_rt = FINAL.__globals__",
    "_real_encode = _rt['_encode']",
    "def _forge_encode(res):",
    "    f = globals().pop('FORGE', None)",
    "    return _real_encode(res) if f is None else f",
    "_rt['_encode'] = _forge_encode",
}, "\n")

-- Python: writes raw bytes on the sandbox's channel socket(s) itself,
-- past the runtime's framing (the connected sockets among the fds; the
-- listening one is left alone)
_M.RAW = table.concat({
    "import os, socket, struct",
    "def _raw(data):",
    "    n = 0",
    "    for fd in range(3, 64):",
    "        try:",
    "            s = socket.socket(fileno=fd)",
    "        except OSError:",
    "            continue",
    "        try:",
    "            listening = s.getsockopt(socket.SOL_SOCKET,"
        .. " socket.SO_ACCEPTCONN)",
    "        finally:",
    "            s.detach()",
    "        if not listening:",
    "            os.write(fd, data)",
    "            n += 1",
    "    return n",
}, "\n")


-- Python for a cell that has the encoder send these bytes next
function _M.forge(bytes)
    return "FORGE = bytes.fromhex('"
           .. bytes:gsub(".", function(c)
                  return string.format("%02x", c:byte())
              end)
           .. "')"
end


-- Python: a frame header (json_len, blob_len) and then data, raw
function _M.raw_frame(json_len, blob_len, data)
    return _M.RAW .. "\n_raw(struct.pack('>II', " .. json_len .. ", "
           .. blob_len .. ") + bytes.fromhex('"
           .. (data or ""):gsub(".", function(c)
                  return string.format("%02x", c:byte())
              end)
           .. "'))"
end


-- does this nginx's error.log have a line containing text?
function _M.log_has(text)
    local f = io.open(ngx.config.prefix() .. "logs/error.log")
    if f == nil then
        return false
    end
    local s = f:read("*a")
    f:close()
    return s:find(text, 1, true) ~= nil
end


-- the models the scripted upstream was asked for, in order
function _M.models_seen()
    local out = {}
    for _, r in ipairs(require("mock_llm").recorded()) do
        out[#out + 1] = tostring(r.model)
    end
    return out
end


-- does any recorded upstream request body contain text?
function _M.upstream_saw(text)
    for _, r in ipairs(require("mock_llm").recorded()) do
        if (r.body or ""):find(text, 1, true) then
            return true
        end
    end
    return false
end


return _M
