-- Helpers for Lua test drivers of the model call layer: call a
-- rlm_chat_passthrough location as a subrequest and look at the result.

local cjson = require "cjson.safe"

local _M = {}


-- POST body (a table) to uri; upstream_stream asks the layer to call the
-- provider with SSE.  Returns the capture result with .json decoded.

function _M.chat(uri, body, upstream_stream)
    -- subrequests inherit the main request's headers
    if upstream_stream then
        ngx.req.set_header("X-RLM-Upstream-Stream", "on")
    else
        ngx.req.clear_header("X-RLM-Upstream-Stream")
    end

    local res = ngx.location.capture(uri, {
        method = ngx.HTTP_POST,
        body = type(body) == "string" and body or cjson.encode(body),
    })

    res.json = cjson.decode(res.body) or {}
    return res
end


function _M.content(res)
    local c = res.json.choices and res.json.choices[1]
    return c and c.message and c.message.content
end


function _M.error_code(res)
    return res.json.error and res.json.error.code
end


function _M.status()
    local res = ngx.location.capture("/status")
    return cjson.decode(res.body)
end


function _M.user(text, extra)
    local body = { messages = { { role = "user", content = text } } }
    for k, v in pairs(extra or {}) do
        body[k] = v
    end
    return body
end


return _M
