-- loopt: helpers for the completion suites' Lua drivers (see RlmLoop.pm).
-- Requests go over real TCP connections through rlmt.

local cjson = require "cjson.safe"
local rlmt = require "rlmt"

local _M = { null = cjson.null }


-- a scripted model: model "script:ID" answers with these steps in order
-- (the last one repeats)
function _M.script(id, steps)
    local res = ngx.location.capture("/mock/script", {
        method = ngx.HTTP_POST,
        body = cjson.encode({ id = id, steps = steps }) })
    assert(res.status == 200, "script: " .. res.status)
end


-- a response with one repl block (lines joined with \n)
function _M.repl(...)
    return "```repl\n" .. table.concat({ ... }, "\n") .. "\n```"
end


-- POST /v1/chat/completions; body is a table (or raw string)
function _M.complete(body, headers, opts)
    local raw = type(body) == "string" and body or cjson.encode(body)
    local res, err = rlmt.http("POST", "/v1/chat/completions", raw,
                               headers, opts)
    if not res then
        error("complete: " .. tostring(err))
    end
    return res
end


function _M.ask(query, extra)
    local body = { model = "script:root",
                   messages = { { role = "user", content = query } } }
    for k, v in pairs(extra or {}) do
        body[k] = v
    end
    return body
end


function _M.answer(res)
    local j = res.json
    local c = type(j) == "table" and j.choices and j.choices[1]
    return c and c.message and c.message.content
end


-- the requests the mock received, as tables with .req (decoded body)
function _M.requests(model)
    local res = ngx.location.capture("/mock/requests")
    local out = {}
    for _, r in ipairs(cjson.decode(res.body) or {}) do
        r.req = cjson.decode(r.body or "") or {}
        if model == nil or r.model == model then
            out[#out + 1] = r
        end
    end
    return out
end


-- the last message a recorded request sent
function _M.last_message(r)
    local msgs = r.req.messages or {}
    local m = msgs[#msgs] or {}
    return m.content
end


-- SSE body -> list of decoded data events, list of comments, done flag
function _M.sse(body)
    local events, comments, done = {}, {}, false
    for block in (body .. "\n\n"):gmatch("(.-)\n\n") do
        for line in block:gmatch("[^\n]+") do
            if line:sub(1, 1) == ":" then
                comments[#comments + 1] = line:sub(3)
            elseif line == "data: [DONE]" then
                done = true
            elseif line:sub(1, 6) == "data: " then
                events[#events + 1] = cjson.decode(line:sub(7))
            end
        end
    end
    return events, comments, done
end


-- the trajectory of a completion's response, as a list of decoded lines
-- (needs the trajectories route in the block's config)
function _M.trajectory(res)
    local id = res.headers["x-rlm-session-id"]
    local f = rlmt.http("GET", "/v1/sessions/" .. id .. "/trajectories/"
                               .. res.json.id)
    assert(f.status == 200, "trajectory: " .. f.status)
    local lines = {}
    for line in f.body:gmatch("[^\n]+") do
        lines[#lines + 1] = cjson.decode(line)
    end
    return lines
end


_M.q = rlmt.q
_M.envelope = rlmt.envelope

return _M
