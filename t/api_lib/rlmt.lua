-- rlmt: a small HTTP client for the API suites' driver locations.
--
-- A driver location (content_by_lua_block) runs a multi-request scenario
-- against the server it lives in, over real TCP connections (cosockets),
-- so the requests go through nginx exactly as a client's would: headers,
-- request body reading, content-type checks, access log.

local cjson = require "cjson.safe"

local _M = { null = cjson.null }


local function parse(raw)
    local head, body = raw:match("^(.-)\r\n\r\n(.*)$")
    if not head then
        return nil, "no header end in " .. #raw .. " bytes"
    end

    local status = tonumber(head:match("^HTTP/1%.%d (%d%d%d)"))
    local headers = {}
    for name, value in head:gmatch("\r\n([^:\r\n]+):%s*([^\r\n]*)") do
        headers[name:lower()] = value
    end

    if headers["transfer-encoding"] == "chunked" then
        local out, pos = {}, 1
        while true do
            local size_hex, data_pos = body:match("^(%x+)[^\r\n]*\r\n()", pos)
            if not size_hex then
                break
            end
            local size = tonumber(size_hex, 16)
            if size == 0 then
                break
            end
            out[#out + 1] = body:sub(data_pos, data_pos + size - 1)
            pos = data_pos + size + 2
        end
        body = table.concat(out)
    end

    return { status = status, headers = headers, body = body,
             json = cjson.decode(body) }
end


-- _M.http(method, path, body, headers, opts) -> res | nil, err
-- res = {status, headers (lowercase names), body, json}
-- body may be a string or a function returning chunks (nil at the end),
-- with headers["Content-Length"] given by the caller.
-- A JSON content type is added when there is a body, unless the caller
-- set Content-Type (false to send none).
-- opts.abort_after: seconds; close the connection that long after the
-- request was sent and return "aborted".
function _M.http(method, path, body, headers, opts)
    opts = opts or {}
    headers = headers or {}

    local sock = ngx.socket.tcp()
    sock:settimeout(opts.timeout or 60000)

    local ok, err = sock:connect("127.0.0.1",
                                 opts.port or tonumber(ngx.var.server_port))
    if not ok then
        return nil, "connect: " .. err
    end

    local lines = { method .. " " .. path .. " HTTP/1.1",
                    "Host: localhost", "Connection: close" }

    if body ~= nil and headers["Content-Type"] == nil then
        headers["Content-Type"] = "application/json"
    end

    if type(body) == "string" and headers["Content-Length"] == nil then
        headers["Content-Length"] = #body
    end

    for name, value in pairs(headers) do
        if value ~= false then
            lines[#lines + 1] = name .. ": " .. tostring(value)
        end
    end

    local req = table.concat(lines, "\r\n") .. "\r\n\r\n"

    if type(body) == "string" then
        req = req .. body
    end

    ok, err = sock:send(req)
    if not ok then
        return nil, "send: " .. err
    end

    if type(body) == "function" then
        while true do
            local chunk = body()
            if chunk == nil then
                break
            end
            ok, err = sock:send(chunk)
            if not ok then
                -- the server may answer early (413) and stop reading
                break
            end
        end
    end

    if opts.abort_after then
        ngx.sleep(opts.abort_after)
        sock:close()
        return nil, "aborted"
    end

    local raw, rerr, partial = sock:receive("*a")
    sock:close()

    raw = raw or partial
    if raw == nil or raw == "" then
        return nil, "receive: " .. tostring(rerr)
    end

    return parse(raw)
end


function _M.json_http(method, path, tbl, headers, opts)
    return _M.http(method, path, tbl and cjson.encode(tbl) or nil,
                   headers, opts)
end


-- POST /v1/sessions; returns the new id or raises
function _M.create(tbl)
    local res, err = _M.http("POST", "/v1/sessions",
                             tbl and cjson.encode(tbl) or "")
    if not res then
        error("create: " .. err)
    end
    if res.status ~= 201 or type(res.json) ~= "table" then
        error("create: status " .. tostring(res.status) .. " " .. res.body)
    end
    return res.json.id, res
end


-- POST /v1/sessions/{id}/eval; returns the decoded body (or raises on a
-- transport failure) and the response
function _M.eval(id, code, extra)
    local req = { code = code }
    for k, v in pairs(extra or {}) do
        req[k] = v
    end

    local res, err = _M.http("POST", "/v1/sessions/" .. id .. "/eval",
                             cjson.encode(req))
    if not res then
        error("eval: " .. err)
    end
    return res.json or {}, res
end


function _M.delete(id)
    local res, err = _M.http("DELETE", "/v1/sessions/" .. id)
    if not res then
        error("delete: " .. err)
    end
    return res
end


-- GET /metrics as { ['name{labels}'] = number }
function _M.metrics()
    local res, err = _M.http("GET", "/metrics")
    if not res then
        error("metrics: " .. err)
    end

    local m = {}
    for line in res.body:gmatch("[^\n]+") do
        if line:sub(1, 1) ~= "#" then
            local name, value = line:match("^(%S+)%s+(%S+)$")
            if name then
                m[name] = tonumber(value)
            end
        end
    end
    return m, res
end


-- One line describing an error answer: status, code, type and whether the
-- envelope is complete (message non-empty string, param key present).
function _M.envelope(res)
    if res == nil then
        return "no response"
    end

    local j = res.json
    if type(j) ~= "table" or type(j.error) ~= "table" then
        return res.status .. " no-envelope"
    end

    local e = j.error
    local complete = type(e.message) == "string" and #e.message > 0
                     and type(e.type) == "string"
                     and (e.param ~= nil)
                     and type(e.code) == "string"

    return res.status .. " " .. tostring(e.code) .. " " .. tostring(e.type)
           .. (complete and "" or " incomplete-envelope")
end


-- session id for tests that choose it: 32 hex digits from a number
function _M.id(n)
    return string.format("%032x", n)
end


-- a string shown on one line: newlines as \n, in double quotes
function _M.q(s)
    s = tostring(s):gsub("\\", "\\\\"):gsub("\n", "\\n")
    return '"' .. s .. '"'
end


function _M.say_cell(label, r)
    local e = type(r.error) == "table" and r.error or nil
    ngx.say(label, ": status=", tostring(r.status),
            e and (" ename=" .. tostring(e.ename)) or "",
            " stdout=", _M.q(r.stdout))
end


return _M
