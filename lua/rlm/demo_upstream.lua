-- DEMO UPSTREAM: serves the deterministic demo model (rlm.demo_model) as
-- an OpenAI-compatible chat completions endpoint, for `make run` without
-- a real provider.  Not a model; clearly labelled in every answer.
--
--   server {
--       listen 127.0.0.1:8081;
--       location = /v1/chat/completions {
--           content_by_lua_block { require("rlm.demo_upstream").serve() }
--       }
--   }
--   rlm_provider demo url=http://127.0.0.1:8081/v1 model=rlm-demo;

local cjson = require "cjson.safe"
local demo = require "rlm.demo_model"

local _M = {}


local function tokens(s)
    return math.ceil(#(s or "") / 4)
end


local function fail(status, message)
    ngx.status = status
    ngx.header["Content-Type"] = "application/json"
    ngx.say(cjson.encode({ error = { message = message,
                                     type = "invalid_request_error",
                                     param = cjson.null,
                                     code = cjson.null } }))
end


function _M.serve()
    if ngx.req.get_method() ~= "POST" then
        return fail(405, "use POST")
    end

    ngx.req.read_body()
    local raw = ngx.req.get_body_data()
    if not raw then
        local file = ngx.req.get_body_file()
        if file then
            local f = io.open(file, "rb")
            if f then
                raw = f:read("*a")
                f:close()
            end
        end
    end

    local req = raw and cjson.decode(raw)
    if type(req) ~= "table" or type(req.messages) ~= "table" then
        return fail(400, "expected a JSON object with \"messages\"")
    end

    local content = demo.respond(req)

    local prompt = 0
    for _, m in ipairs(req.messages) do
        if type(m) == "table" and type(m.content) == "string" then
            prompt = prompt + tokens(m.content)
        end
    end

    local usage = { prompt_tokens = prompt,
                    completion_tokens = tokens(content),
                    total_tokens = prompt + tokens(content) }
    local id = "chatcmpl-demo-" .. ngx.now() * 1000
    local model = type(req.model) == "string" and req.model or "rlm-demo"

    if req.stream then
        ngx.header["Content-Type"] = "text/event-stream"
        local function event(choices, extra)
            local obj = { id = id, object = "chat.completion.chunk",
                          created = ngx.time(), model = model,
                          choices = choices }
            for k, v in pairs(extra or {}) do
                obj[k] = v
            end
            ngx.print("data: ", cjson.encode(obj), "\n\n")
        end

        event({ { index = 0, delta = { role = "assistant",
                                       content = content },
                  finish_reason = cjson.null } })
        event({ { index = 0, delta = {}, finish_reason = "stop" } })

        local so = req.stream_options
        if type(so) == "table" and so.include_usage then
            event(cjson.empty_array or {}, { usage = usage })
        end

        ngx.print("data: [DONE]\n\n")
        return
    end

    ngx.header["Content-Type"] = "application/json"
    ngx.say(cjson.encode({
        id = id, object = "chat.completion", created = ngx.time(),
        model = model,
        choices = { { index = 0,
                      message = { role = "assistant", content = content },
                      finish_reason = "stop" } },
        usage = usage,
    }))
end


return _M
