-- rlm.policy: the Lua policy in front of the C handlers.
--
--     init_by_lua_block {
--         require("rlm.policy").configure{
--             keys_file = "/etc/ngx_rlm/keys",          -- auth (off if nil)
--             routes_file = "/etc/ngx_rlm/routes.json", -- routing (off if nil)
--         }
--     }
--     location = /v1/chat/completions {
--         access_by_lua_block { require("rlm.policy").access() }
--         ...
--     }
--
-- access() works out from the URI what it guards:
--   POST /v1/chat/completions: auth, rate, body checks, route, limits
--     into the body's `rlm`, concurrency slot;
--   /v1/sessions...: auth, rate, and on POST /v1/sessions the tenant's
--     session limit;
--   /v1/models (and anything else): auth and rate.
-- access("create") guards a location of your own where a POST makes a
-- session (conf/lua-example.conf): auth, rate and the session limit.
-- authenticate() checks the key alone (rlm.cluster, before a forward).
-- models() answers GET /v1/models (content phase).  log() gives back the
-- slots a request held; conf/policy-server.conf runs it for every
-- request of the server that includes it.
--
-- It hands its results to C only through nginx variables (declared in
-- conf/policy.conf) and the request body:
--   $rlm_tenant      tenant of the API key, "" with auth off
--   $rlm_route       routing table entry used ("*" = default route)
--   $rlm_provider    rlm_provider name, "" = C default (first provider)
--   $rlm_root_model  model of the root loop, "" = the request's model
--   $rlm_sub_model   model of sub calls, "" = the root model
--   $rlm_code_models models the completion's code may name (upstream
--                    names, rlm.routing.code_models), "" = root and sub
--   $rlm_tenant_max_sessions  the tenant's max_sessions, "" = none
--   $rlm_prices      the routing table's prices (rlm_completion_prices)
--   $rlm_system_prompt  "on" when the route takes rlm.system_prompt
--   body .rlm        { max_iterations, max_depth, timeout, sub_model,
--                      max_cost, system_prompt, sub_sampling }
--
-- Each concern is a module and can be swapped:
--   configure{ auth = mod, routing = mod, shaping = mod, limits = mod }
-- with the same functions as rlm.auth, rlm.routing, rlm.shaping and
-- rlm.limits (see docs/lua.md).

local errors = require "rlm.errors"

local _M = { _VERSION = "0.1.0" }

local conf = {
    keys_file = nil,
    routes_file = nil,
    body_max = nil,
    shared_dict = "rlm_policy",
    auth = require "rlm.auth",
    routing = require "rlm.routing",
    shaping = require "rlm.shaping",
    limits = require "rlm.limits",
}

local KNOWN = {
    keys_file = "string", routes_file = "string", body_max = "number",
    shared_dict = "string", auth = "table", routing = "table",
    shaping = "table", limits = "table",
}


-- configure(opts): settings for the whole worker (call it from
-- init_by_lua*).  Unknown keys raise, so a typo does not silently leave
-- auth off.
function _M.configure(opts)
    for k, v in pairs(opts or {}) do
        if KNOWN[k] == nil then
            error("rlm.policy.configure: unknown option " .. tostring(k), 2)
        end
        if type(v) ~= KNOWN[k] then
            error("rlm.policy.configure: " .. k .. " must be a " .. KNOWN[k],
                  2)
        end
        conf[k] = v
    end
end


-- settings for this request: $rlm_keys_file / $rlm_routes_file, when the
-- server or location sets them, win over configure()
local function request_conf()
    local keys = ngx.var.rlm_keys_file
    local routes = ngx.var.rlm_routes_file

    if keys == nil and routes == nil then
        return conf
    end

    return setmetatable({
        keys_file = keys or conf.keys_file,
        routes_file = routes or conf.routes_file,
    }, { __index = conf })
end


local function set_vars(tenant, route, sub_model)
    local var = ngx.var
    var.rlm_tenant = tenant.id
    if route then
        var.rlm_route = route.name or ""
        var.rlm_provider = route.provider or ""
        var.rlm_root_model = route.root_model or ""
        var.rlm_sub_model = sub_model or route.sub_model or ""
    end
end


-- what the code of this completion may ask for: the models it may name
-- and the tenant's session quota, which its child RLMs count against
-- (rlm_completion_code_models, rlm_session_owner_max)
local function set_code_policy(c, tenant, route, sub, model)
    local var = ngx.var
    var.rlm_code_models = c.routing.code_models
                          and c.routing.code_models(c, route, tenant,
                                                    model, sub)
                          or ""
    var.rlm_tenant_max_sessions = tenant.max_sessions
                                  and tostring(tenant.max_sessions) or ""

    -- declared by conf/policy.conf; an older copy may lack them
    pcall(function()
        var.rlm_prices = route.prices or ""
        var.rlm_system_prompt = route.system_prompt and "on" or ""
    end)
end


local function refuse(c, err)
    c.limits.release(c)
    return errors.send(err)
end


-- does this completion make a new session?  Yes when it names none
-- (header or cookie); a named one must exist (the handler answers 404
-- otherwise), and a reset replaces it.
local function opens_session()
    local var = ngx.var
    local id = var.http_x_rlm_session_id or var.cookie_rlm_session

    return id == nil or id == ""
end


local function completions(c, tenant)
    local shaping = c.shaping

    local body, err = shaping.read(c)
    if body == nil then
        return refuse(c, err)
    end

    local ok
    ok, err = shaping.validate(body.req)
    if not ok then
        return refuse(c, err)
    end

    local route
    route, err = c.routing.resolve(c, body.req.model, tenant)
    if route == nil then
        return refuse(c, err)
    end

    -- a sub model the client names goes through the routing table too:
    -- it must be a model this tenant may use, on the same provider
    local asked = body.req.rlm
    local sub = route.sub_model or ""
    if type(asked) == "table" and type(asked.sub_model) == "string" then
        local sr
        sr, err = c.routing.resolve(c, asked.sub_model, tenant,
                                    "rlm.sub_model")
        if sr == nil then
            return refuse(c, err)
        end
        if not route.off and sr.provider ~= route.provider then
            return refuse(c, errors.bad_request("invalid_value",
                "'rlm.sub_model' must be served by the same provider as"
                .. " 'model'.", "rlm.sub_model"))
        end
        sub = route.off and asked.sub_model or sr.root_model
        if sub == "" then
            sub = asked.sub_model
        end
    end

    local given = {}
    if type(asked) == "table" then
        given.max_iterations = asked.max_iterations
        given.max_depth = asked.max_depth
        given.timeout = asked.timeout
        given.max_cost = asked.max_cost
        given.compaction_threshold = asked.compaction_threshold
        given.system_prompt = asked.system_prompt
        given.sub_sampling = asked.sub_sampling
    end
    if sub ~= "" then
        given.sub_model = sub
    end

    if type(given.system_prompt) == "string" and not route.off
       and not route.system_prompt
    then
        return refuse(c, errors.bad_request("invalid_value",
            "The model '" .. tostring(body.req.model) .. "' does not take"
            .. " a system prompt from the request.", "rlm.system_prompt"))
    end

    -- the tenant's cost budget on this node (rlm.limits)
    local cost_left = c.limits.cost_left and c.limits.cost_left(c, tenant)
    if cost_left ~= nil and cost_left <= 0 then
        return refuse(c, c.limits.cost_spent(tenant))
    end

    local final = shaping.clamp(route, given, cost_left)

    ok, err = shaping.rewrite(body, final)
    if ok == nil then
        return refuse(c, err)
    end

    set_vars(tenant, route, sub)
    set_code_policy(c, tenant, route, sub, body.req.model)

    ok, err = c.limits.concurrency(c, tenant)
    if not ok then
        return refuse(c, err)
    end

    -- a completion that opens a new session counts against the tenant's
    -- quota, as POST /v1/sessions does
    if tenant.max_sessions and opens_session() then
        ok, err = c.limits.sessions(c, tenant)
        if not ok then
            return refuse(c, err)
        end
    end
end


local function is_completions(uri)
    return uri == "/v1/chat/completions"
end


-- POST .../sessions creates; POST .../sessions/{id}/eval does not
local function is_session_create(uri, method, anywhere)
    if method ~= "POST" then
        return false
    end
    if anywhere then
        return uri:find("/sessions/?$") ~= nil
    end
    return uri == "/v1/sessions" or uri == "/v1/sessions/"
end


-- access([kind]): the access-phase entry point.  kind, if given, is
-- "completions", "sessions", "create" or "plain" and overrides the URI
-- check (for locations mounted elsewhere; with "sessions", a POST to a
-- URI ending in /sessions is a creation; with "create", every POST is).
function _M.access(kind)
    local c = request_conf()

    local tenant, err = c.auth.authenticate(c)
    if tenant == nil then
        return errors.send(err)
    end

    set_vars(tenant, nil)
    ngx.ctx.rlm_policy_tenant = tenant

    local ok
    ok, err = c.limits.rate(c, tenant)
    if not ok then
        return errors.send(err)
    end

    local uri = ngx.var.uri
    local method = ngx.req.get_method()

    if kind == "completions" or (kind == nil and is_completions(uri)) then
        if method ~= "POST" then
            return    -- the C handler answers 405
        end
        return completions(c, tenant)
    end

    if (kind == "sessions" and is_session_create(uri, method, true))
       or (kind == "create" and method == "POST")
       or (kind == nil and is_session_create(uri, method))
    then
        ok, err = c.limits.sessions(c, tenant)
        if not ok then
            return refuse(c, err)
        end
    end
end


-- authenticate(): the API key alone (no rate, no limits), for a request
-- this node hands to another that runs the whole policy (rlm.cluster).
-- Sends the refusal and ends the request, or returns the tenant.
function _M.authenticate()
    local c = request_conf()

    local tenant, err = c.auth.authenticate(c)
    if tenant == nil then
        return errors.send(err)
    end

    return tenant
end


-- models(): content handler of GET /v1/models and, in a location that
-- also takes /v1/models/{id}, of one model (auth included, so it works
-- with or without access() on the location).  A model the tenant may not
-- use is answered as one that does not exist: 404 model_not_found.
function _M.models()
    local c = request_conf()
    local id = ngx.var.uri:match("^/v1/models/(.+)$")

    if ngx.req.get_method() ~= "GET" and ngx.req.get_method() ~= "HEAD" then
        ngx.header["Allow"] = "GET"
        return errors.send(errors.new(405, "invalid_request_error",
                                      "method_not_allowed",
                                      "Use GET for /v1/models."))
    end

    -- without access() on the location, authenticate and count here
    local tenant = ngx.ctx.rlm_policy_tenant
    if tenant == nil then
        local err
        tenant, err = c.auth.authenticate(c)
        if tenant == nil then
            return errors.send(err)
        end
        local ok
        ok, err = c.limits.rate(c, tenant)
        if not ok then
            return errors.send(err)
        end
    end

    local text, err
    if id then
        text, err = require("rlm.models").one(c, tenant, id, c.routing)
        if text == nil and err == nil then
            if #id > 200 then
                id = id:sub(1, 200) .. "..."
            end
            err = errors.new(404, "invalid_request_error", "model_not_found",
                             "The model '" .. id .. "' does not exist or"
                             .. " you do not have access to it.", "model")
        end
    else
        text, err = require("rlm.models").body(c, tenant, c.routing)
    end

    if text == nil then
        return errors.send(err)
    end

    ngx.header["Content-Type"] = "application/json"
    ngx.say(text)
end


-- log(): gives back concurrency and session-creation slots.
function _M.log()
    conf.limits.release(conf)
    if conf.limits.spend then
        conf.limits.spend(conf)
    end
end


return _M
