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
-- response: rewrite, access, content).
function _M.send(err)
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


return _M
