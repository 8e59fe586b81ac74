-- Model upstream for bench/rlm_bench: t/lib/mock_llm.lua plus one
-- stateless model family for the loop benchmarks.
--
--   model "loop:N"  answers a ```repl block `x = 1` while the
--                   conversation has fewer than N assistant messages,
--                   then a ```repl block that sets the final answer;
--                   a completion with it takes N + 1 iterations (and
--                   N + 1 cells).  It keeps no state between requests,
--                   so any number of completions can use it at once
--                   (mock_llm's "script:ID" queues are shared by all).
--   anything else   goes to mock_llm.serve() ("script:ID", "rlm-demo",
--                   echo; the "mock" field with "latency").
--
-- Answers at once (no latency) with a fixed usage, so the numbers only
-- hold what the server under test does around the call.

local cjson = require "cjson.safe"
local mock = require "mock_llm"

local _M = {}

local STEP = "```repl\nx = 1\n```"
local FINAL = "```repl\nanswer['content'] = 'done'\n"
              .. "answer['ready'] = True\n```"


local function body()
    ngx.req.read_body()
    local raw = ngx.req.get_body_data()
    if raw then
        return raw
    end

    local file = ngx.req.get_body_file()
    if not file then
        return nil
    end

    local f = io.open(file, "rb")
    if not f then
        return nil
    end

    raw = f:read("*a")
    f:close()
    return raw
end


function _M.serve()
    local raw = body()
    local req = raw and cjson.decode(raw)
    local model = type(req) == "table" and req.model

    local n = type(model) == "string" and tonumber(model:match("^loop:(%d+)$"))
    if not n then
        return mock.serve()
    end

    local turns = 0
    for _, m in ipairs(req.messages or {}) do
        if type(m) == "table" and m.role == "assistant" then
            turns = turns + 1
        end
    end

    ngx.header["Content-Type"] = "application/json"
    ngx.print(cjson.encode({
        id = "chatcmpl-bench",
        object = "chat.completion",
        created = ngx.time(),
        model = model,
        choices = { { index = 0,
                      message = { role = "assistant",
                                  content = turns < n and STEP or FINAL },
                      finish_reason = "stop" } },
        usage = { prompt_tokens = 100, completion_tokens = 10,
                  total_tokens = 110 },
    }))
end


return _M
