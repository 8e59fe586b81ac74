-- Load driver for bench/rlm_bench part 3, run inside an nginx of its own
-- (one worker, cosockets):
--
--   GET /drive?port=P&conc=C&secs=S&body=FILE[&mode=api&turns=N]
--
-- C light threads, each with one keep-alive connection to 127.0.0.1:P,
-- loop for S seconds: POST /v1/chat/completions with the body read from
-- FILE (no session header: a new session each time), then DELETE the
-- session named by the answer's X-RLM-Session-Id (sessions made by
-- completions stay until deleted or idle-expired).  Only the completion
-- is timed.  Answers with a JSON summary: completions, completions/s,
-- latency percentiles, answers that were not 200 + a finished
-- chat.completion, failed deletes, connection errors.
--
-- reuse=1: each client keeps the session of its first completion and
-- names it (X-RLM-Session-Id) in the next ones, deleting it at the end:
-- completions without a new sandbox each.
--
-- mode=api is the baseline: the same work driven by the client over the
-- server's pieces, as a client-side orchestrator would: POST
-- /v1/sessions, one cell that sets a small `context`, then N times
-- (POST /chat, the call layer's passthrough to the same model, + one
-- `x = 1` cell), then the (untimed) DELETE.

local cjson = require "cjson.safe"

local _M = {}


local function read_answer(sock)
    local line, err = sock:receive("*l")
    if not line then
        return nil, err
    end

    local status = tonumber(line:match("^HTTP/1%.%d (%d+)"))
    local len, chunked, session

    while true do
        line, err = sock:receive("*l")
        if not line then
            return nil, err
        end
        if line == "" then
            break
        end
        local name, value = line:match("^([^:]+):%s*(.*)$")
        if name then
            name = name:lower()
            if name == "content-length" then
                len = tonumber(value)
            elseif name == "transfer-encoding" and value:find("chunked") then
                chunked = true
            elseif name == "x-rlm-session-id" then
                session = value
            end
        end
    end

    local body = ""
    if chunked then
        local parts = {}
        while true do
            line, err = sock:receive("*l")
            if not line then
                return nil, err
            end
            local size = tonumber(line:match("^(%x+)"), 16)
            if not size or size == 0 then
                sock:receive("*l")
                break
            end
            parts[#parts + 1], err = sock:receive(size)
            if not parts[#parts] then
                return nil, err
            end
            sock:receive("*l")
        end
        body = table.concat(parts)
    elseif len and len > 0 then
        body, err = sock:receive(len)
        if not body then
            return nil, err
        end
    end

    return { status = status, body = body, session = session }
end


local function http(method, path, body)
    return method .. " " .. path .. " HTTP/1.1\r\nHost: localhost\r\n"
           .. "Content-Type: application/json\r\n"
           .. "Content-Length: " .. #body .. "\r\n\r\n" .. body
end


local CHAT = cjson.encode({ model = "loop:1", messages = {
    { role = "system", content = string.rep("You answer a query. ", 100) },
    { role = "user", content = "go" } } })
local CELL = '{"code":"x = 1"}'
local CONTEXT = '{"code":"context = \'a small context of one line\'"}'


-- the api baseline's unit of work; returns true, or false + why
local function by_hand(sock, turns)
    local res, err, ok
    ok, err = sock:send(http("POST", "/v1/sessions", ""))
    res = ok and read_answer(sock)
    if not res then
        return nil, err
    end
    local id = res.body:match('"id":"(%x+)"')
    if res.status ~= 201 or not id then
        return false, "create " .. tostring(res.status)
    end

    local steps = { { "/v1/sessions/" .. id .. "/eval", CONTEXT } }
    for i = 1, turns do
        steps[#steps + 1] = { "/chat", CHAT }
        steps[#steps + 1] = { "/v1/sessions/" .. id .. "/eval", CELL }
    end

    local good = true
    for _, s in ipairs(steps) do
        ok, err = sock:send(http("POST", s[1], s[2]))
        res = ok and read_answer(sock)
        if not res then
            return nil, err
        end
        if res.status ~= 200
           or (s[2] ~= CHAT and not res.body:find('"status":"ok"', 1, true))
        then
            good = false
        end
    end

    return good, id
end


local function worker(port, deadline, request, stats, turns, reuse)
    local sock, kept

    while ngx.now() < deadline do
        if not sock then
            sock = ngx.socket.tcp()
            sock:settimeouts(5000, 60000, 60000)
            local ok, err = sock:connect("127.0.0.1", port)
            if not ok then
                stats.conn_errors = stats.conn_errors + 1
                sock = nil
                ngx.sleep(0.01)
                goto continue
            end
        end

        if turns then
            ngx.update_time()
            local t0 = ngx.now()
            local good, id = by_hand(sock, turns)
            ngx.update_time()
            if good == nil then
                stats.conn_errors = stats.conn_errors + 1
                sock:close()
                sock = nil
                goto continue
            end
            stats.lat[#stats.lat + 1] = ngx.now() - t0
            if not good then
                stats.bad = stats.bad + 1
            end
            if id then
                local ok = sock:send(http("DELETE", "/v1/sessions/" .. id, ""))
                local d = ok and read_answer(sock)
                if not d then
                    stats.conn_errors = stats.conn_errors + 1
                    sock:close()
                    sock = nil
                elseif d.status ~= 200 and d.status ~= 204 then
                    stats.delete_failed = stats.delete_failed + 1
                end
            end

        else
            ngx.update_time()
            local t0 = ngx.now()
            local ok, err = sock:send(kept and request:gsub("^([^\r]*\r\n)",
                "%1X-RLM-Session-Id: " .. kept .. "\r\n") or request)
            local res = ok and read_answer(sock)
            ngx.update_time()

            if not res then
                stats.conn_errors = stats.conn_errors + 1
                sock:close()
                sock = nil
                goto continue
            end

            stats.lat[#stats.lat + 1] = ngx.now() - t0

            if res.status ~= 200
               or not res.body:find('"object":"chat.completion"', 1, true)
               or not res.body:find('"content":"done"', 1, true)
            then
                stats.bad = stats.bad + 1
                if stats.bad <= 3 then
                    stats.samples[#stats.samples + 1] =
                        tostring(res.status) .. " " .. res.body:sub(1, 300)
                end
            end

            if reuse and res.status == 200 then
                kept = res.session

            elseif res.session then
                ok = sock:send("DELETE /v1/sessions/" .. res.session
                               .. " HTTP/1.1\r\nHost: localhost\r\n"
                               .. "Content-Length: 0\r\n\r\n")
                local d = ok and read_answer(sock)
                if not d then
                    stats.conn_errors = stats.conn_errors + 1
                    sock:close()
                    sock = nil
                elseif d.status ~= 200 and d.status ~= 204 then
                    stats.delete_failed = stats.delete_failed + 1
                end
            end
        end

        ::continue::
    end

    if sock and kept then
        sock:send("DELETE /v1/sessions/" .. kept
                  .. " HTTP/1.1\r\nHost: localhost\r\n"
                  .. "Content-Length: 0\r\n\r\n")
        read_answer(sock)
    end

    if sock then
        sock:setkeepalive()
    end
end


function _M.drive()
    local args = ngx.req.get_uri_args()
    local port = tonumber(args.port)
    local conc = tonumber(args.conc) or 100
    local secs = tonumber(args.secs) or 20
    local turns = args.mode == "api" and (tonumber(args.turns) or 3) or nil

    local f = assert(io.open(args.body, "rb"))
    local body = f:read("*a")
    f:close()

    local request = "POST /v1/chat/completions HTTP/1.1\r\n"
                    .. "Host: localhost\r\n"
                    .. "Content-Type: application/json\r\n"
                    .. "Content-Length: " .. #body .. "\r\n\r\n" .. body

    local stats = { lat = {}, bad = 0, conn_errors = 0, delete_failed = 0,
                    samples = {} }

    ngx.update_time()
    local start = ngx.now()
    local deadline = start + secs
    local threads = {}
    for i = 1, conc do
        threads[i] = ngx.thread.spawn(worker, port, deadline, request, stats,
                                     turns, args.reuse == "1")
    end
    for i = 1, conc do
        ngx.thread.wait(threads[i])
    end
    ngx.update_time()
    local elapsed = ngx.now() - start

    local lat = stats.lat
    table.sort(lat)
    local function pct(p)
        if #lat == 0 then
            return -1
        end
        return lat[math.floor(p / 100 * (#lat - 1) + 0.5) + 1] * 1000
    end

    ngx.say(cjson.encode({
        completions = #lat,
        elapsed = elapsed,
        rate = #lat / elapsed,
        p50 = pct(50), p75 = pct(75), p90 = pct(90), p99 = pct(99),
        max = pct(100),
        bad = stats.bad,
        conn_errors = stats.conn_errors,
        delete_failed = stats.delete_failed,
        samples = stats.samples,
    }))
end


return _M
