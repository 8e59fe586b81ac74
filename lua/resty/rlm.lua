-- resty.rlm: sessions and code execution of ngx_rlm from Lua.
--
--     local rlm = require "resty.rlm"
--     local s, err = rlm.session_create()
--     local r, err = rlm.eval(s.id, "x = 6 * 7\nprint(x)")
--     -- r.status == "ok", r.stdout == "42\n"
--
-- Everything that waits for a sandbox goes through ngx.location.capture
-- to an internal location served by the module (`location /_rlm/ {
-- internal; rlm_sessions_api; }`, see docs/api.md): lua-nginx-module
-- 0.10.23 has no C API to resume a coroutine from C, and a subrequest
-- lets the module do its non-blocking work on the event loop while this
-- coroutine is suspended.  The worker never blocks.
--
-- Phases: rewrite_by_lua*, access_by_lua*, content_by_lua* (anything
-- where ngx.location.capture is allowed).  Not in init*, set_by_lua*,
-- header/body filters, log_by_lua* or ngx.timer callbacks: there is no
-- request to hang a subrequest on.
--
-- Results are Lua tables decoded from the module's JSON answers (JSON null
-- is cjson.null).  Failures return nil and a string "<code>: <message>":
-- <code> is the `code` of the module's OpenAI-style error envelope
-- (session_not_found, invalid_session_id, session_queue_full,
-- session_limit, manager_unavailable, ...) or one of the bridge's own:
-- bad_argument (refused before any subrequest), bad_response (the module
-- answered something that is not JSON) and subrequest_failed.
--
-- A cell that raised, timed out or ran out of memory is NOT a failure of
-- rlm.eval: the call succeeds and the table's `status` says what happened.

local cjson = require "cjson.safe"

local capture = ngx.location.capture
local type = type
local next = next
local tostring = tostring
local find = string.find
local byte = string.byte

local HTTP_GET = ngx.HTTP_GET
local HTTP_POST = ngx.HTTP_POST
local HTTP_PUT = ngx.HTTP_PUT
local HTTP_DELETE = ngx.HTTP_DELETE


local _M = {
    _VERSION = "0.1.0",
}

-- where the internal location is mounted
local prefix = "/_rlm"

-- variable that `rlm_session_owner` reads in that location
local owner_var = "rlm_tenant"


local BAD_ID = "id must be 32 lowercase hex digits"


local function fail(code, message)
    return nil, code .. ": " .. message
end


-- Session ids are 32 lowercase hex digits (128 bits).  Checked here so a
-- bad id never costs a subrequest and never puts "/" or "?" into the
-- subrequest's URI.
local function valid_id(id)
    return type(id) == "string" and #id == 32 and not find(id, "[^0-9a-f]")
end

_M.valid_id = valid_id


-- A subrequest's answer -> table, or nil and "code: message".
local function decode(res, what)
    if res == nil then
        return fail("subrequest_failed", what .. " failed")
    end

    local body = res.body
    local data = (body and body ~= "") and cjson.decode(body) or nil

    if res.status >= 200 and res.status < 300 then
        if type(data) ~= "table" then
            return fail("bad_response", what .. " answered "
                        .. res.status .. " without a JSON object")
        end
        return data
    end

    if type(data) == "table" and type(data.error) == "table" then
        local e = data.error
        local code = e.code
        if type(code) ~= "string" then
            code = type(e.type) == "string" and e.type
                   or ("http_" .. res.status)
        end
        return fail(code, tostring(e.message))
    end

    return fail("http_" .. res.status, what .. " answered " .. res.status)
end


-- On a node of a cluster (docs/cluster.md) a session may live on another
-- node.  The bridge does not forward (a subrequest stays on this node);
-- it says where the session is: "session_on_other_node: ... node N ...".
local has_cluster, cluster = pcall(require, "rlm.cluster")

local function elsewhere(id)
    if not has_cluster then
        return nil
    end
    local node, addr = cluster.owner_of(id)
    if node == nil then
        return nil
    end
    return fail("session_on_other_node", "session " .. id
                .. " lives on node " .. node .. " (" .. addr .. "); this "
                .. "node cannot reach it from Lua: send the request to "
                .. "that node, or through its HTTP API, which forwards")
end


local function request(method, path, body, args, opts, what, id)
    if id then
        local _, err = elsewhere(id)
        if err then
            return nil, err
        end
    end

    local sr = { method = method, args = args, body = body }

    if opts and opts.owner ~= nil then
        if type(opts.owner) ~= "string" then
            return fail("bad_argument", "owner must be a string")
        end
        sr.vars = { [owner_var] = opts.owner }
    end

    return decode(capture(prefix .. path, sr), what)
end


local function check_opts(opts)
    if opts ~= nil and type(opts) ~= "table" then
        return fail("bad_argument", "opts must be a table")
    end
    return true
end


-- what every call on an existing session checks first
local function check_session_args(id, opts)
    if not valid_id(id) then
        return fail("bad_argument", BAD_ID)
    end
    return check_opts(opts)
end


-- rlm.configure{prefix = "/_rlm", owner_var = "rlm_tenant"}
-- prefix: URI prefix of the internal location with rlm_sessions_api.
-- owner_var: the variable `rlm_session_owner` uses in that location; the
-- functions' opts.owner sets it in the subrequest.  The variable must be
-- declared (e.g. `set $rlm_tenant "";` in the server) when owner is used.
function _M.configure(conf)
    if type(conf) ~= "table" then
        return fail("bad_argument", "configure expects a table")
    end

    if conf.prefix ~= nil then
        if type(conf.prefix) ~= "string" or byte(conf.prefix, 1) ~= 47
           or byte(conf.prefix, -1) == 47
        then
            return fail("bad_argument",
                        'prefix must start with "/" and not end with one')
        end
        prefix = conf.prefix
    end

    if conf.owner_var ~= nil then
        if type(conf.owner_var) ~= "string"
           or find(conf.owner_var, "[^%w_]") or conf.owner_var == ""
        then
            return fail("bad_argument", "owner_var must be a variable name")
        end
        owner_var = conf.owner_var
    end

    return true
end


-- rlm.session_create([opts]) -> session table {id, object="rlm.session",
-- created, status, ...}.  opts.id: a client-chosen id (32 lowercase hex);
-- opts.owner: see configure.
function _M.session_create(opts)
    local ok, err = check_opts(opts)
    if not ok then
        return nil, err
    end

    local body = "{}"

    if opts and opts.id ~= nil then
        if not valid_id(opts.id) then
            return fail("bad_argument", BAD_ID)
        end
        body = cjson.encode({ id = opts.id })
    end

    return request(HTTP_POST, "/sessions", body, nil, opts, "session_create",
                   opts and opts.id)
end


-- rlm.session_get(id [, opts]) -> session table
function _M.session_get(id, opts)
    local ok, err = check_session_args(id, opts)
    if not ok then
        return nil, err
    end

    return request(HTTP_GET, "/sessions/" .. id, nil, nil, opts,
                   "session_get", id)
end


-- rlm.session_list([opts]) -> {object="list", data={session, ...}}
function _M.session_list(opts)
    local ok, err = check_opts(opts)
    if not ok then
        return nil, err
    end

    return request(HTTP_GET, "/sessions", nil, nil, opts, "session_list")
end


-- rlm.session_delete(id [, opts]) -> {id, object="rlm.session",
-- deleted=true}
function _M.session_delete(id, opts)
    local ok, err = check_session_args(id, opts)
    if not ok then
        return nil, err
    end

    return request(HTTP_DELETE, "/sessions/" .. id, nil, nil, opts,
                   "session_delete", id)
end


-- rlm.eval(id, code [, opts]) -> cell table {status, stdout, stderr,
-- error, duration_ms, cell, answer, state_delta}.
-- opts.timeout: seconds (number > 0, capped by rlm_cell_timeout);
-- opts.echo: print the repr of a final bare expression; opts.owner.
function _M.eval(id, code, opts)
    if not valid_id(id) then
        return fail("bad_argument", BAD_ID)
    end

    if type(code) ~= "string" then
        return fail("bad_argument", "code must be a string")
    end

    local ok, err = check_opts(opts)
    if not ok then
        return nil, err
    end

    local req = { code = code }

    if opts then
        if opts.timeout ~= nil then
            if type(opts.timeout) ~= "number" or not (opts.timeout > 0) then
                return fail("bad_argument",
                            "timeout must be a positive number")
            end
            req.timeout = opts.timeout
        end

        if opts.echo ~= nil then
            if type(opts.echo) ~= "boolean" then
                return fail("bad_argument", "echo must be a boolean")
            end
            req.echo = opts.echo
        end
    end

    local body
    body, err = cjson.encode(req)
    if body == nil then
        return fail("bad_argument", "code not encodable: " .. tostring(err))
    end

    return request(HTTP_POST, "/sessions/" .. id .. "/eval", body, nil, opts,
                   "eval", id)
end


-- rlm.load_context(id, value [, opts]) -> {object="rlm.context", name,
-- bytes, kind}.
-- A Lua string is loaded as text (Python str) unless opts.format is
-- "json", in which case it must already be a JSON document; a table,
-- number or boolean is encoded to JSON and Python sees the decoded value.
-- opts.name: variable to load instead of `context` (e.g. "context_1");
-- opts.owner.
function _M.load_context(id, value, opts)
    local ok, err = check_session_args(id, opts)
    if not ok then
        return nil, err
    end

    local format = opts and opts.format
    if format ~= nil and format ~= "json" and format ~= "text" then
        return fail("bad_argument", 'format must be "json" or "text"')
    end

    local name = opts and opts.name
    if name ~= nil and (type(name) ~= "string"
                        or not find(name, "^[%a_][%w_]*$"))
    then
        return fail("bad_argument", "name must be a Python identifier")
    end

    local body
    local tv = type(value)

    if tv == "string" then
        body = value
        format = format or "text"

    elseif tv == "table" or tv == "number" or tv == "boolean" then
        if format == "text" then
            return fail("bad_argument", "a text context must be a string")
        end

        body, err = cjson.encode(value)
        if body == nil then
            return fail("bad_argument", "value not encodable: "
                        .. tostring(err))
        end
        format = "json"

    else
        return fail("bad_argument", "cannot load a " .. tv .. " as context")
    end

    return request(HTTP_PUT, "/sessions/" .. id .. "/context", body,
                   { format = format, name = name }, opts, "load_context",
                   id)
end


return _M
