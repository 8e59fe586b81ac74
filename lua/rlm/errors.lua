-- rlm.errors: OpenAI-style error answers of the policy layer.
--
-- Every concern (auth, limits, routing, shaping) reports a refusal as a
-- plain table
--
--     { status = 401, type = "authentication_error",
--       code = "invalid_api_key", message = "...", param = nil,
--       headers = { ["WWW-Authenticate"] = "Bearer" } }
--
-- and rlm.policy sends it with send().  Keeping the refusal a value (not
-- an ngx.exit inside the concern) lets a replacement module reuse the
-- same shapes and lets tests look at refusals without a response.

local cjson = require "cjson.safe"

local _M = {}


function _M.new(status, etype, code, message, param, headers)
    return { status = status, type = etype, code = code,
             message = message, param = param, headers = headers }
end


function _M.bad_request(code, message, param)
    return _M.new(400, "invalid_request_error", code, message, param)
end


-- The envelope: {"error":{"message","type","param","code"}}; a missing
-- param is JSON null, as in OpenAI's answers.
function _M.encode(err)
    return cjson.encode({
        error = {
            message = err.message or "request refused",
            type = err.type or "invalid_request_error",
            param = err.param == nil and cjson.null or err.param,
            code = err.code == nil and cjson.null or err.code,
        }
    })
end


-- Sends the refusal and ends the request (any phase that may send a
-- response: rewrite, access, content).  An error with `finalize` set is
-- left to nginx: the request ends with its status as a special response
-- (for a 413 before the body is read: no "100 Continue", the connection
-- closed), and the module or an error_page writes the envelope.
function _M.send(err)
    if err.finalize then
        return ngx.exit(err.status)
    end

    ngx.status = err.status or 400
    ngx.header["Content-Type"] = "application/json"

    if err.headers then
        for name, value in pairs(err.headers) do
            ngx.header[name] = value
        end
    end

    ngx.say(_M.encode(err))
    -- the answer is out: HTTP_OK ends the request in any phase
    return ngx.exit(ngx.HTTP_OK)
end


-- nginx's own error answers, for page(): type, code, message
local PAGES = {
    [400] = { "invalid_request_error", "bad_request",
              "The request could not be understood." },
    [401] = { "authentication_error", "invalid_api_key",
              "Authentication is required." },
    [403] = { "permission_error", "forbidden",
              "This URL is not available to your address." },
    [404] = { "invalid_request_error", "not_found" },
    [405] = { "invalid_request_error", "method_not_allowed" },
    [408] = { "invalid_request_error", "request_timeout",
              "The request did not arrive in time." },
    [411] = { "invalid_request_error", "length_required",
              "This request needs a Content-Length." },
    [413] = { "invalid_request_error", "body_too_large",
              "The request body is larger than this URL accepts." },
    [414] = { "invalid_request_error", "uri_too_long",
              "The request URI is too long." },
    [429] = { "rate_limit_error", "rate_limit_exceeded",
              "Too many requests. Try again later." },
    [500] = { "server_error", "internal_error",
              "The server had an error while processing the request." },
    [501] = { "invalid_request_error", "not_implemented",
              "This server does not implement that method." },
    [502] = { "server_error", "bad_gateway",
              "The server got a bad answer from an upstream server." },
    [503] = { "server_error", "service_unavailable",
              "The server cannot take this request right now." },
    [504] = { "server_error", "gateway_timeout",
              "An upstream server did not answer in time." },
}


-- page(): content handler of an error_page location, so that nginx's
-- own answers (an unknown URI, a method a location does not serve, a
-- body over client_max_body_size, a request line it cannot parse, a
-- 5xx) come in the envelope and not as HTML:
--
--     error_page 400 403 404 405 ... 504 /_rlm_error;
--     location = /_rlm_error { internal; content_by_lua_block {
--         require("rlm.errors").page() } }
--
-- The status is the one nginx was answering with ($status).  The
-- redirect made the request a GET of /_rlm_error, so the method and URI
-- the message names come from the request line ($request).
function _M.page()
    local status = tonumber(ngx.var.status) or 500
    local p = PAGES[status]
    if p == nil then
        p = status >= 500 and PAGES[500] or PAGES[400]
    end

    local message = p[3]
    if message == nil then
        local what = (ngx.var.request or ""):match("^(%S+%s+%S+)") or "?"
        if #what > 200 then
            what = what:sub(1, 200) .. "..."
        end
        message = status == 405
                  and "The method is not allowed here: " .. what .. "."
                  or "Unknown request URL: " .. what .. "."
    end

    return _M.send(_M.new(status, p[1], p[2], message))
end


return _M
