-- A scripted OpenAI-compatible chat completions upstream for the tests.
--
-- Served by nginx + lua inside a test configuration:
--
--   lua_shared_dict mock_llm 8m;
--   location = /v1/chat/completions { content_by_lua_block {
--       require("mock_llm").serve() } }
--   location = /mock/requests { content_by_lua_block {
--       require("mock_llm").requests() } }
--   location = /mock/script { content_by_lua_block {
--       require("mock_llm").script() } }
--   location = /mock/reset { content_by_lua_block {
--       require("mock_llm").reset() } }
--
-- What a request gets is a "step", a table with these optional fields:
--   status         HTTP status (200)
--   retry_after    Retry-After header value
--   error          error message (non-2xx answers use OpenAI's envelope)
--   latency        seconds to wait before answering
--   barrier        wait until this many requests are in flight together
--                  (at most barrier_timeout seconds, default 10)
--   hang           seconds to wait without answering (true: 30)
--   drop           close the connection without an answer
--   body           a raw body, sent as is (malformed answers)
--   sse_raw        a raw event stream body
--   stream         false: answer JSON even when SSE was asked for
--   content        the assistant text (default: an echo of the prompt)
--   chunks         the pieces a stream sends (default: three pieces)
--   chunk_delay    seconds between stream pieces
--   no_done        leave out "data: [DONE]"
--   finish_reason  ("stop")
--   usage          a usage table, or false to leave it out
--
-- The step comes from, first to last:
--   1. the request's "mock" field (the call layer forwards unknown fields);
--   2. a model "script:ID": the next step of the queue ID, set with
--      POST /mock/script {"id": ID, "steps": [...]}; the last step of a
--      queue repeats once the others are used up;
--   3. a model "rlm-demo": lua/rlm/demo_model.lua, the deterministic demo;
--   4. anything else: an echo of the last user message.
--
-- Every request is recorded (headers that matter, body, arrival time) so
-- that tests can assert what the server sent: GET /mock/requests.

local cjson = require "cjson.safe"

local _M = {}

local DICT = "mock_llm"

-- [] rather than {} for "choices" of the usage chunk, where cjson can
local EMPTY_ARRAY = cjson.empty_array
                    or setmetatable({}, cjson.empty_array_mt or {})


local function dict()
    local d = ngx.shared[DICT]
    if not d then
        error("mock_llm needs: lua_shared_dict " .. DICT .. " 8m;")
    end
    return d
end


local function approx_tokens(s)
    return math.ceil(#(s or "") / 4)
end


local function message_text(content)
    if type(content) == "string" then
        return content
    end

    if type(content) == "table" then
        local parts = {}
        for _, part in ipairs(content) do
            if type(part) == "table" and type(part.text) == "string" then
                parts[#parts + 1] = part.text
            end
        end
        return table.concat(parts, "\n")
    end

    return ""
end


local function prompt_text(req)
    local parts = {}
    for _, m in ipairs(req.messages or {}) do
        parts[#parts + 1] = message_text(m.content)
    end
    return table.concat(parts, "\n")
end


local function last_user(req)
    local msgs = req.messages or {}
    for i = #msgs, 1, -1 do
        if msgs[i].role == "user" then
            return message_text(msgs[i].content)
        end
    end
    return ""
end


local function record(req, raw)
    local d = dict()
    local n = d:incr("requests", 1, 0)
    local h = ngx.req.get_headers()

    d:set("request:" .. n, cjson.encode({
        n = n,
        time = ngx.now(),
        authorization = h["authorization"],
        content_type = h["content-type"],
        model = req and req.model,
        connection = tonumber(ngx.var.connection),
        connection_requests = tonumber(ngx.var.connection_requests),
        stream = req and req.stream or false,
        body = raw,
    }))

    return n
end


local function next_script_step(id)
    local d = dict()
    local key = "script:" .. id
    local n = d:incr(key .. ":used", 1, 0)
    local total = d:get(key .. ":n") or 0

    if total == 0 then
        return nil
    end

    local step = d:get(key .. ":" .. math.min(n, total))
    return cjson.decode(step)
end


local function send_error(status, message, retry_after)
    ngx.status = status
    ngx.header["Content-Type"] = "application/json"
    if retry_after then
        ngx.header["Retry-After"] = tostring(retry_after)
    end
    ngx.print(cjson.encode({ error = {
        message = message or ("mock error " .. status),
        type = status == 429 and "rate_limit_error" or "server_error",
        param = cjson.null,
        code = cjson.null,
    } }))
end


local function split3(s)
    if #s < 3 then
        return { s }
    end
    local a = math.floor(#s / 3)
    return { s:sub(1, a), s:sub(a + 1, 2 * a), s:sub(2 * a + 1) }
end


local function answer(req, step, n)
    local content = step.content
    if content == nil then
        content = "echo: " .. last_user(req)
    end

    local id = "chatcmpl-mock-" .. n
    local model = req.model or "mock"
    local created = ngx.time()

    local usage = step.usage
    if usage == nil then
        local p = approx_tokens(prompt_text(req))
        local c = approx_tokens(content)
        usage = { prompt_tokens = p, completion_tokens = c,
                  total_tokens = p + c }
    end

    local finish = step.finish_reason or "stop"

    if req.stream and step.stream ~= false then
        ngx.header["Content-Type"] = "text/event-stream"
        ngx.header["Cache-Control"] = "no-cache"

        local function event(obj)
            ngx.print("data: ", cjson.encode(obj), "\n\n")
            ngx.flush(true)
        end

        event({ id = id, object = "chat.completion.chunk",
                created = created, model = model,
                choices = { { index = 0,
                              delta = { role = "assistant", content = "" },
                              finish_reason = cjson.null } } })

        for _, piece in ipairs(step.chunks or split3(content)) do
            if step.chunk_delay then
                ngx.sleep(step.chunk_delay)
            end
            event({ id = id, object = "chat.completion.chunk",
                    created = created, model = model,
                    choices = { { index = 0, delta = { content = piece },
                                  finish_reason = cjson.null } } })
        end

        event({ id = id, object = "chat.completion.chunk",
                created = created, model = model,
                choices = { { index = 0, delta = {},
                              finish_reason = finish } } })

        local so = req.stream_options
        if usage and type(so) == "table" and so.include_usage then
            event({ id = id, object = "chat.completion.chunk",
                    created = created, model = model,
                    choices = EMPTY_ARRAY, usage = usage })
        end

        if not step.no_done then
            ngx.print("data: [DONE]\n\n")
        end
        return
    end

    ngx.header["Content-Type"] = "application/json"
    ngx.print(cjson.encode({
        id = id,
        object = "chat.completion",
        created = created,
        model = model,
        choices = { { index = 0,
                      message = { role = "assistant", content = content },
                      finish_reason = finish } },
        usage = usage or nil,
    }))
end


local function serve(d)
    ngx.req.read_body()
    local raw = ngx.req.get_body_data()
    if not raw then
        local file = ngx.req.get_body_file()
        if file then
            local f = io.open(file, "rb")
            raw = f:read("*a")
            f:close()
        end
    end

    local req = raw and cjson.decode(raw)
    local n = record(req, raw)

    -- the most requests seen at the same time, for concurrency caps
    local inflight = d:incr("inflight", 1, 0)
    if inflight > (d:get("max_inflight") or 0) then
        d:set("max_inflight", inflight)
    end

    if type(req) ~= "table" then
        return send_error(400, "mock: request body is not JSON")
    end

    local step = req.mock
    local model = type(req.model) == "string" and req.model or ""

    if type(step) ~= "table" then
        local id = model:match("^script:(.+)$")
        if id then
            step = next_script_step(id)
        elseif model == "rlm-demo" then
            step = { content = require("rlm.demo_model").respond(req) }
        end
    end

    step = step or {}

    if step.barrier then
        -- hold every request until this many are in flight at once (or
        -- the timeout passes); then the barrier stays open for the rest
        local deadline = ngx.now() + (step.barrier_timeout or 10)
        while not d:get("barrier_open")
              and (d:get("inflight") or 0) < step.barrier
              and ngx.now() < deadline
        do
            ngx.sleep(0.005)
        end
        d:set("barrier_open", true)
    end

    if step.latency then
        ngx.sleep(step.latency)
    end

    if step.hang then
        ngx.sleep(step.hang == true and 30 or step.hang)
        return "drop"
    end

    if step.drop then
        return "drop"
    end

    if step.body then
        ngx.status = step.status or 200
        ngx.header["Content-Type"] = step.content_type or "application/json"
        ngx.print(step.body)
        return
    end

    if step.sse_raw then
        ngx.status = step.status or 200
        ngx.header["Content-Type"] = "text/event-stream"
        ngx.print(step.sse_raw)
        return
    end

    if step.status and step.status >= 300 then
        return send_error(step.status, step.error, step.retry_after)
    end

    return answer(req, step, n)
end



function _M.serve()
    local d = dict()
    local ok, res = pcall(serve, d)

    if (d:get("inflight") or 0) > 0 then
        d:incr("inflight", -1)
    end

    if not ok then
        error(res)
    end

    if res == "drop" then
        return ngx.exit(444)
    end
end


-- POST {"id": "...", "steps": [step, ...]} replaces the queue "id"

function _M.script()
    ngx.req.read_body()
    local doc = cjson.decode(ngx.req.get_body_data() or "")
    if type(doc) ~= "table" or type(doc.id) ~= "string"
       or type(doc.steps) ~= "table"
    then
        ngx.status = 400
        ngx.say("expected {\"id\":..., \"steps\":[...]}")
        return
    end

    local d = dict()
    local key = "script:" .. doc.id
    d:set(key .. ":n", #doc.steps)
    d:set(key .. ":used", 0)
    for i, step in ipairs(doc.steps) do
        d:set(key .. ":" .. i, cjson.encode(step))
    end
    ngx.say("ok ", #doc.steps)
end


-- GET: every recorded request, oldest first, as a JSON array

function _M.requests()
    local d = dict()
    local n = d:get("requests") or 0
    local out = {}
    for i = 1, n do
        out[#out + 1] = cjson.decode(d:get("request:" .. i) or "null")
    end
    ngx.header["Content-Type"] = "application/json"
    ngx.say(cjson.encode(out))
end


-- the recorded requests as a Lua table, for Lua test drivers

function _M.recorded()
    local d = dict()
    local n = d:get("requests") or 0
    local out = {}
    for i = 1, n do
        out[#out + 1] = cjson.decode(d:get("request:" .. i) or "null")
    end
    return out
end


function _M.max_inflight()
    return dict():get("max_inflight") or 0
end


function _M.reset()
    dict():flush_all()
    ngx.say("ok")
end


return _M
