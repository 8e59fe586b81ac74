-- rlm.shaping: checks an OpenAI chat completion request before the C
-- handler sees it, normalises it and writes the route's limits into it.
--
-- read(conf)          -> body | nil, err   (body = {raw=, req=, members=})
-- validate(req)       -> true | nil, err
-- clamp(route, rlm)   -> the `rlm` object to send (limits clamped/filled)
-- rewrite(body, rlm)  -> true | nil, err   (only if something changed)
--
-- Bodies nginx kept in memory are read with ngx.req.get_body_data().
-- Bodies it wrote to a temporary file (larger than client_body_buffer_size)
-- are read from that file if they are at most conf.body_max bytes
-- (default 16 MiB); a larger one is refused with 413 `body_too_large`,
-- never passed on unchecked.  A Content-Length over conf.body_max is
-- refused the same way before a byte of the body is read, so a client
-- that declares 400 MB gets its answer at once and nothing is spooled.
-- With the module loaded, its ngx_http_rlm_body_limit() (FFI) does that
-- check and also stops a chunked body at body_max while it is read.  A rewritten body goes back where it came
-- from: memory (ngx.req.set_body_data) or a new temporary file next to
-- nginx's (ngx.req.set_body_file, removed with the request).
--
-- The body is never re-encoded as a whole: lua-cjson would turn [] into
-- {} and round numbers to 14 digits.  The top-level members the policy
-- does not change are copied byte for byte; only `max_tokens`,
-- `max_completion_tokens` and `rlm` are written anew.  A body with a
-- duplicate top-level key is refused, so the policy and the C parser
-- cannot disagree about which `model` or `rlm` counts.

local cjson_safe = require "cjson.safe"
local errors = require "rlm.errors"
local ffi = require "ffi"

local type = type
local pairs = pairs
local ipairs = ipairs
local tostring = tostring
local find = string.find
local sub = string.sub
local byte = string.byte
local format = string.format
local concat = table.concat

local _M = {}

local json = cjson_safe.new()
json.decode_invalid_numbers(false)    -- no NaN, Infinity, hex

local DEFAULT_BODY_MAX = 16 * 1024 * 1024

-- above this, the "context" string is not decoded here (see read())
local BIG_BODY = 1024 * 1024

local ROLES = { system = true, user = true, assistant = true, tool = true,
                developer = true }

-- keys of the `rlm` object and what their values must be
-- (max_depth 0 is allowed: a root loop without sub-calls)
local RLM_KEYS = { max_iterations = "integer", max_depth = "count",
                   timeout = "number", sub_model = "string",
                   max_cost = "number", system_prompt = "string",
                   compaction_threshold = "count",
                   sub_sampling = "object" }

-- top-level members the policy writes itself
local REWRITTEN = { max_tokens = true, max_completion_tokens = true,
                    rlm = true }

local null = cjson_safe.null


-- the module's body cap for a body read here (ngx_http_rlm_body_cap.c),
-- nil when the module is not loaded (nginx dlopens it RTLD_GLOBAL)
local body_limit, get_request

do
    pcall(ffi.cdef, [[
        intptr_t ngx_http_rlm_body_limit(void *r, int64_t cap);
    ]])

    local ok, f = pcall(function() return ffi.C.ngx_http_rlm_body_limit end)
    local okb, base = pcall(require, "resty.core.base")

    if ok and okb and base.get_request then
        body_limit = f
        get_request = base.get_request
    end
end


local function bad(code, message, param)
    return nil, errors.bad_request(code, message, param)
end


local function is_array(t)
    if type(t) ~= "table" then
        return false
    end
    local n = #t
    for k in pairs(t) do
        if type(k) ~= "number" or k < 1 or k > n or k % 1 ~= 0 then
            return false
        end
    end
    return true
end


local function is_object(t)
    if type(t) ~= "table" then
        return false
    end
    -- an empty table is {} or []: accept it as an empty object
    return next(t) == nil or not is_array(t)
end


local function positive_integer(v)
    return type(v) == "number" and v >= 1 and v % 1 == 0 and v < 2^53
end


local function count(v)
    return type(v) == "number" and v >= 0 and v % 1 == 0 and v < 2^53
end


local function positive_number(v)
    return type(v) == "number" and v > 0 and v < math.huge
end


-- JSON null means "not given" for optional fields
local function given(v)
    return v ~= nil and v ~= null
end


-- Byte ranges of the top-level members of a JSON object already known to
-- be valid (cjson decoded it): { {key=, from=, to=}, ... }.  Strings are
-- skipped with string.find, so a body of megabytes of text costs a few
-- C-level scans.
local function skip_string(s, i)
    -- s[i] is the opening quote.  A plain find (memchr speed) for the
    -- next quote, then count the backslashes in front of it: an odd
    -- number means it is escaped.  A character class in the pattern
    -- would make Lua's matcher walk the string byte by byte, ~20x slower
    -- on megabytes of message text.
    local j = i + 1
    while true do
        local k = find(s, '"', j, true)
        if k == nil then
            return nil
        end
        local b = k - 1
        while byte(s, b) == 92 do         -- backslash
            b = b - 1
        end
        if (k - 1 - b) % 2 == 0 then
            return k
        end
        j = k + 1
    end
end


local function skip_value(s, i)
    local c = byte(s, i)

    if c == 34 then                       -- "
        return skip_string(s, i)
    end

    if c == 123 or c == 91 then           -- { [
        local depth = 0
        local j = i
        while true do
            local k = find(s, '[%[%]{}"]', j)
            if k == nil then
                return nil
            end
            c = byte(s, k)
            if c == 34 then
                k = skip_string(s, k)
                if k == nil then
                    return nil
                end
            elseif c == 123 or c == 91 then
                depth = depth + 1
            else
                depth = depth - 1
                if depth == 0 then
                    return k
                end
            end
            j = k + 1
        end
    end

    -- number, true, false, null
    local k = find(s, "[,}%]%s]", i)
    return k and k - 1
end


local function members(s)
    local out = {}
    local seen = {}
    local i = find(s, "{", 1, true) + 1

    while true do
        i = find(s, "[^%s]", i)
        if i == nil then
            return nil
        end

        if byte(s, i) == 125 and #out == 0 then   -- {}
            return out
        end

        if byte(s, i) ~= 34 then
            return nil
        end

        local kend = skip_string(s, i)
        if kend == nil then
            return nil
        end
        local key = json.decode(sub(s, i, kend))
        if type(key) ~= "string" then
            return nil
        end
        if seen[key] then
            return nil, key
        end
        seen[key] = true

        local colon = find(s, "[^%s]", kend + 1)
        if colon == nil or byte(s, colon) ~= 58 then
            return nil
        end

        local vstart = find(s, "[^%s]", colon + 1)
        local vend = vstart and skip_value(s, vstart)
        if vend == nil then
            return nil
        end

        out[#out + 1] = { key = key, from = i, to = vend, value = vstart }

        i = find(s, "[^%s]", vend + 1)
        if i == nil then
            return nil
        end
        if byte(s, i) == 125 then
            return out
        end
        if byte(s, i) ~= 44 then
            return nil
        end
        i = i + 1
    end
end


-- for t/lua_policy.t: the scanner alone
_M._members = members


local function too_large(size, max)
    return errors.new(413, "invalid_request_error", "body_too_large",
                      "The request body is " .. size .. " bytes; this"
                      .. " server checks and accepts at most " .. max
                      .. " bytes per completion request.")
end


-- a Content-Length over max: refused before the body is read
local function declared_too_large(max)
    local r = body_limit and get_request()

    if r ~= nil then
        if tonumber(body_limit(r, max)) == 413 then
            -- nginx answers (no "100 Continue", the connection closed
            -- after a lingering read); the module writes the envelope
            local err = too_large(ngx.var.http_content_length, max)
            err.finalize = true
            return err
        end
        return nil
    end

    local declared = tonumber(ngx.var.http_content_length)
    if declared and declared > max then
        -- no "100 Continue" must invite the client to send the body
        -- that nginx drains after this answer
        ngx.req.clear_header("Expect")
        return too_large(declared, max)
    end

    return nil
end


-- read(conf) -> { raw =, req =, members =, file = path|nil } | nil, err
function _M.read(conf)
    local max = conf.body_max or DEFAULT_BODY_MAX

    local refused = declared_too_large(max)
    if refused then
        return nil, refused
    end

    ngx.req.read_body()

    local raw = ngx.req.get_body_data()
    local file

    if raw == nil then
        file = ngx.req.get_body_file()
    end

    if file ~= nil then
        local f, err = io.open(file, "rb")
        if not f then
            ngx.log(ngx.ERR, "rlm policy: cannot open the buffered body: ",
                    err)
            return nil, errors.new(500, "server_error", "internal_error",
                                   "The request body could not be read.")
        end

        local size = f:seek("end")
        if size == nil then
            f:close()
            return nil, errors.new(500, "server_error", "internal_error",
                                   "The request body could not be read.")
        end

        if size > max then
            f:close()
            return nil, too_large(size, max)
        end

        f:seek("set", 0)
        raw = f:read("*a")
        f:close()
    end

    if raw == nil or raw == "" then
        return bad("invalid_json", "The request body is empty; send a JSON"
                   .. " object.", nil)
    end

    if not find(raw, "^%s*{") then
        return bad("invalid_json", "The request body must be a JSON"
                   .. " object.", nil)
    end

    -- A large body's "context" (the data, not the request) is left out of
    -- the decode: the C handler checks a string at memory speed and hands
    -- an array or object to the sandbox's parser, where lua-cjson would
    -- spend about 10 ns a byte on it.
    local text = raw
    local list, dup

    if #raw > BIG_BODY then
        list, dup = members(raw)
        for _, m in ipairs(list or {}) do
            local c = m.key == "context" and byte(raw, m.value)
            if c == 34 or c == 91 or c == 123 then      -- " [ {
                text = sub(raw, 1, m.value - 1) .. (c == 34 and '""' or "null")
                       .. sub(raw, m.to + 1)
                break
            end
        end
    end

    local req, err = json.decode(text)
    if type(req) ~= "table" then
        return bad("invalid_json", "The request body is not valid JSON: "
                   .. tostring(err), nil)
    end

    if text == raw then
        list, dup = members(raw)
    end
    if list == nil then
        if dup then
            return bad("invalid_json", "The key '" .. dup .. "' appears"
                       .. " more than once.", dup)
        end
        return bad("invalid_json", "The request body is not a JSON object"
                   .. " this server can read.", nil)
    end

    return { raw = raw, req = req, members = list, file = file }
end


local function check_content(i, m)
    local p = "messages[" .. i .. "].content"
    local c = m.content

    if not given(c) then
        if m.role == "assistant"
           and (given(m.tool_calls) or given(m.function_call))
        then
            return true
        end
        return bad("missing_field", "Each message needs a 'content'.", p)
    end

    if type(c) == "string" then
        return true
    end

    if not is_array(c) or #c == 0 then
        return bad("invalid_type", "'content' must be a string or a"
                   .. " non-empty array of content parts.", p)
    end

    for j, part in ipairs(c) do
        local pp = p .. "[" .. (j - 1) .. "]"
        if not is_object(part) then
            return bad("invalid_type", "A content part must be an object.",
                       pp)
        end
        if part.type ~= "text" then
            return bad("invalid_value", "Only content parts of type 'text'"
                       .. " are supported.", pp .. ".type")
        end
        if type(part.text) ~= "string" then
            return bad(given(part.text) and "invalid_type" or "missing_field",
                       "A text part needs a string 'text'.", pp .. ".text")
        end
    end

    return true
end


-- validate(req) -> true | nil, err
function _M.validate(req)
    if not given(req.model) then
        return bad("missing_field", "You must provide a model parameter.",
                   "model")
    end
    if type(req.model) ~= "string" or req.model == "" then
        return bad("invalid_type", "'model' must be a non-empty string.",
                   "model")
    end

    local msgs = req.messages
    if not given(msgs) then
        return bad("missing_field", "'messages' is required.", "messages")
    end
    if not is_array(msgs) or #msgs == 0 then
        return bad("invalid_type", "'messages' must be a non-empty array.",
                   "messages")
    end

    local users = 0
    for n, m in ipairs(msgs) do
        local i = n - 1
        local p = "messages[" .. i .. "]"

        if not is_object(m) then
            return bad("invalid_type", "Each message must be an object.", p)
        end
        if not given(m.role) then
            return bad("missing_field", "Each message needs a 'role'.",
                       p .. ".role")
        end
        if not ROLES[m.role] then
            return bad("invalid_value", "'role' must be one of system,"
                       .. " user, assistant, tool, developer.", p .. ".role")
        end

        local ok, err = check_content(i, m)
        if not ok then
            return nil, err
        end

        if m.role == "user" then
            users = users + 1
        end
    end

    if users == 0 then
        return bad("invalid_value", "'messages' must contain at least one"
                   .. " user message.", "messages")
    end

    if given(req.stream) and type(req.stream) ~= "boolean" then
        return bad("invalid_type", "'stream' must be a boolean.", "stream")
    end

    for _, k in ipairs({ "max_tokens", "max_completion_tokens" }) do
        if given(req[k]) and not positive_integer(req[k]) then
            return bad("invalid_value", "'" .. k .. "' must be a positive"
                       .. " integer.", k)
        end
    end

    if given(req.max_tokens) and given(req.max_completion_tokens)
       and req.max_tokens ~= req.max_completion_tokens
    then
        return bad("invalid_value", "'max_completion_tokens' and"
                   .. " 'max_tokens' disagree; send one of them.",
                   "max_completion_tokens")
    end

    local temp = req.temperature
    if given(temp) and (type(temp) ~= "number" or not (temp >= 0)
                        or temp > 2)
    then
        return bad("invalid_value", "'temperature' must be a number from 0"
                   .. " to 2.", "temperature")
    end

    if given(req.reset) and type(req.reset) ~= "boolean" then
        return bad("invalid_type", "'reset' must be a boolean.", "reset")
    end

    if given(req.n) and req.n ~= 1 then
        return bad("invalid_value", "Only n = 1 is supported.", "n")
    end

    if given(req.stream_options) then
        if not is_object(req.stream_options) then
            return bad("invalid_type", "'stream_options' must be an"
                       .. " object.", "stream_options")
        end
        if req.stream ~= true then
            return bad("invalid_value", "'stream_options' is only allowed"
                       .. " when 'stream' is true.", "stream_options")
        end
    end

    local rlm = req.rlm
    if given(rlm) then
        if not is_object(rlm) then
            return bad("invalid_type", "'rlm' must be an object.", "rlm")
        end

        for k, v in pairs(rlm) do
            local want = RLM_KEYS[k]
            local p = "rlm." .. tostring(k)

            if want == nil then
                return bad("unknown_parameter", "Unknown field in 'rlm':"
                           .. " use max_iterations, max_depth, timeout,"
                           .. " sub_model, max_cost, compaction_threshold,"
                           .. " system_prompt or sub_sampling.", p)
            end

            if v ~= null then
                local ok
                if want == "integer" then
                    ok = positive_integer(v)
                elseif want == "count" then
                    ok = count(v)
                elseif want == "number" then
                    ok = positive_number(v)
                elseif want == "object" then
                    ok = is_object(v)
                else
                    ok = type(v) == "string" and v ~= ""
                end

                if not ok then
                    local what = {
                        integer = " positive integer",
                        count = "n integer >= 0",
                        number = " positive number",
                        string = " non-empty string",
                        object = "n object",
                    }
                    return bad("invalid_value", "'" .. p .. "' must be a"
                               .. what[want] .. ".", p)
                end
            end
        end
    end

    return true
end


-- clamp(route, asked [, cost_left]) -> the rlm object to send.
-- asked: the client's `rlm` (validated) or nil.  Each limit is the
-- client's value capped at the route's, or the route's when the client
-- gave none; sub_model is decided by the caller and passed in
-- asked.sub_model.  max_cost is also capped at cost_left (what the
-- tenant has left).  system_prompt and sub_sampling pass as they are
-- (the caller checks that the route takes a system prompt).
function _M.clamp(route, asked, cost_left)
    local out = {}
    asked = (type(asked) == "table") and asked or {}

    for _, k in ipairs({ "max_iterations", "max_depth", "timeout",
                         "max_cost", "compaction_threshold" }) do
        local v = asked[k]
        local cap = route[k]
        if v == nil or v == null then
            v = cap
        elseif cap ~= nil and v > cap then
            v = cap
        end
        out[k] = v
    end

    if cost_left ~= nil and (out.max_cost == nil
                             or out.max_cost > cost_left)
    then
        out.max_cost = cost_left
    end

    if type(asked.sub_model) == "string" and asked.sub_model ~= "" then
        out.sub_model = asked.sub_model
    end

    if type(asked.system_prompt) == "string" then
        out.system_prompt = asked.system_prompt
    end

    if type(asked.sub_sampling) == "table" then
        out.sub_sampling = asked.sub_sampling
    end

    return out
end


local function number_text(v)
    if v % 1 == 0 and v < 2^53 then
        return format("%d", v)
    end
    return format("%.17g", v)
end


local function rlm_text(rlm)
    local parts = {}
    for _, k in ipairs({ "max_iterations", "max_depth", "timeout",
                         "max_cost", "compaction_threshold" }) do
        if rlm[k] ~= nil then
            parts[#parts + 1] = '"' .. k .. '":' .. number_text(rlm[k])
        end
    end
    for _, k in ipairs({ "sub_model", "system_prompt", "sub_sampling" }) do
        if rlm[k] ~= nil then
            parts[#parts + 1] = '"' .. k .. '":' .. json.encode(rlm[k])
        end
    end
    return "{" .. concat(parts, ",") .. "}"
end


local function same_rlm(asked, rlm)
    if asked == nil or asked == null then
        return next(rlm) == nil
    end
    for k, v in pairs(asked) do
        if v ~= null and rlm[k] ~= v then
            return false
        end
        if v == null then
            return false
        end
    end
    for k, v in pairs(rlm) do
        if asked[k] ~= v then
            return false
        end
    end
    return true
end


-- rewrite(body, rlm) -> changed (boolean) | nil, err
-- Writes max_completion_tokens as max_tokens and the final `rlm`; the
-- other members are copied unchanged.  Nothing is written when the body
-- already says exactly that.
function _M.rewrite(body, rlm)
    local req = body.req
    local tokens = req.max_tokens
    if not given(tokens) then
        tokens = req.max_completion_tokens
    end

    if req.max_completion_tokens == nil and same_rlm(req.rlm, rlm) then
        return false
    end

    local raw = body.raw
    local parts = {}

    for _, m in ipairs(body.members) do
        if not REWRITTEN[m.key] then
            parts[#parts + 1] = sub(raw, m.from, m.to)
        end
    end

    if given(tokens) then
        parts[#parts + 1] = '"max_tokens":' .. number_text(tokens)
    end

    if next(rlm) ~= nil then
        parts[#parts + 1] = '"rlm":' .. rlm_text(rlm)
    end

    local new = "{" .. concat(parts, ",") .. "}"

    if body.file == nil then
        ngx.req.set_body_data(new)
        return true
    end

    -- the body came from a file: write the new one to a file too, next to
    -- nginx's (same directory, same permissions), removed with the request
    local path = body.file .. ".rlm"
    local f, err = io.open(path, "wb")
    if f then
        local ok
        ok, err = f:write(new)
        f:close()
        if ok then
            ngx.req.set_body_file(path, true)
            return true
        end
        os.remove(path)
    end

    ngx.log(ngx.ERR, "rlm policy: cannot write the rewritten body: ", err)
    return nil, errors.new(500, "server_error", "internal_error",
                           "The request body could not be rewritten.")
end


return _M
