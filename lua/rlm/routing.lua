-- rlm.routing: model name or alias -> provider, root and sub model, and
-- the route's limits.
--
-- Off unless a routing table is configured (policy.configure{
-- routes_file = }, or `set $rlm_routes_file /path;`, which wins).  With
-- routing off every model is accepted and the C side's defaults apply
-- (first provider, the request's model, sub model = root model).
--
-- Routing table (JSON, re-read when it changes, like the keys file):
--
--     { "models": {
--         "gpt-4o-mini": {                    -- the public model id
--           "provider": "openai",             -- an rlm_provider name
--           "root_model": "gpt-4o-mini",      -- default: the id
--           "sub_model": "gpt-4o-mini",       -- default: root model
--           "aliases": ["fast"],
--           "max_iterations": 20,             -- maximum and default
--           "max_depth": 1,
--           "timeout": 120,                   -- seconds
--           "max_cost": 0.50,                 -- per completion, money
--           "compaction_threshold": 60000,    -- tokens, 0 = never
--           "system_prompt": true,            -- rlm.system_prompt allowed
--           "owned_by": "openai",             -- for GET /v1/models
--           "created": 1721172741 } },
--       "default": { "provider": "local" },   -- optional
--       "prices": {                           -- optional, per 1M tokens
--         "gpt-4o-mini": { "prompt": 0.15, "completion": 0.6 } } }
--
-- "default" (optional) routes any model that is not in the table; its
-- root_model defaults to "" (the C side then uses the client's model).
-- Every field but the id is optional.  Limits are numbers: max_iterations
-- a positive integer, max_depth an integer >= 0, timeout and max_cost
-- positive.
--
-- "prices" are keyed by upstream model name (a route's root_model or
-- sub_model, or a model code names): what the provider charges per
-- million prompt and completion tokens, in any one currency.  The C side
-- gets them as text (prices_text(), $rlm_prices) and reports the cost of
-- every call; a model without a price costs nothing.
--
-- A tenant whose key has `models=...` may use only those models (names
-- or aliases of the same route count as the same model), and the
-- default route only if the list has "*".  A model a tenant may not use
-- answers exactly like an unknown one.

local cjson = require "cjson.safe"
local filecache = require "rlm.filecache"

local _M = {}

-- max_depth may be 0 (no sub-calls); the others must be above 0
local LIMITS = { max_iterations = "integer", max_depth = "count",
                 timeout = "number", max_cost = "number",
                 compaction_threshold = "count" }
local STRINGS = { provider = true, root_model = true, sub_model = true,
                  owned_by = true }


local function check_route(where, r)
    if type(r) ~= "table" then
        return nil, where .. " must be an object"
    end

    for k, v in pairs(r) do
        if LIMITS[k] then
            local want = LIMITS[k]
            if type(v) ~= "number" or v ~= v or v == math.huge
               or (want == "count" and v < 0) or (want ~= "count" and v <= 0)
               or (want ~= "number" and v % 1 ~= 0)
            then
                return nil, where .. "." .. k .. " must be a "
                            .. (want == "count" and "whole number >= 0"
                                or "positive " .. want)
            end
        elseif STRINGS[k] then
            if type(v) ~= "string" then
                return nil, where .. "." .. k .. " must be a string"
            end
        elseif k == "aliases" then
            if type(v) ~= "table" then
                return nil, where .. ".aliases must be an array"
            end
            for _, a in ipairs(v) do
                if type(a) ~= "string" or a == "" then
                    return nil, where .. ".aliases must be strings"
                end
            end
        elseif k == "system_prompt" then
            if type(v) ~= "boolean" then
                return nil, where .. ".system_prompt must be true or false"
            end
        elseif k == "created" then
            if type(v) ~= "number" then
                return nil, where .. ".created must be a number"
            end
        else
            return nil, where .. ": unknown field " .. tostring(k)
        end
    end

    return true
end


-- the "prices" object -> "model prompt completion ..." (sorted), or
-- nil, err
local function price_number(v)
    return type(v) == "number" and v == v and v >= 0 and v < 1e9
end


-- digits and a point, never an exponent (the C side reads only that)
local function price_text(v)
    local s = string.format("%.12f", v):gsub("0+$", ""):gsub("%.$", "")
    return s
end


local function prices(t)
    if t == nil then
        return ""
    end

    if type(t) ~= "table" then
        return nil, "routes file: \"prices\" must be an object"
    end

    local out = {}
    for model, p in pairs(t) do
        local where = "routes file: prices." .. tostring(model)
        if type(model) ~= "string" or model == ""
           or model:find("[%s,]")
        then
            return nil, "routes file: a priced model name must be a"
                        .. " non-empty string without spaces or commas"
        end
        if type(p) ~= "table" then
            return nil, where .. " must be an object"
        end
        for k in pairs(p) do
            if k ~= "prompt" and k ~= "completion" then
                return nil, where .. ": unknown field " .. tostring(k)
            end
        end
        if not price_number(p.prompt) or not price_number(p.completion) then
            return nil, where .. ": prompt and completion must be numbers"
                        .. " >= 0 (per million tokens)"
        end
        out[#out + 1] = model .. " " .. price_text(p.prompt) .. " "
                        .. price_text(p.completion)
    end

    table.sort(out)

    return table.concat(out, " ")
end


-- text -> { routes = { [id] = route }, names = { [id or alias] = id },
--           ids = { id, alias, ... in file order-independent sort },
--           default = route | nil }
function _M.parse(text)
    local t = cjson.decode(text)
    if type(t) ~= "table" then
        return nil, "routes file: not a JSON object"
    end

    if type(t.models) ~= "table" then
        return nil, "routes file: \"models\" must be an object"
    end

    for k in pairs(t) do
        if k ~= "models" and k ~= "default" and k ~= "prices" then
            return nil, "routes file: unknown top-level field " .. tostring(k)
        end
    end

    local db = { routes = {}, names = {}, ids = {} }

    local text, err = prices(t.prices)
    if text == nil then
        return nil, err
    end
    db.prices = text

    for id, r in pairs(t.models) do
        if type(id) ~= "string" or id == "" then
            return nil, "routes file: model ids must be non-empty strings"
        end

        local ok, err = check_route("routes file: models." .. id, r)
        if not ok then
            return nil, err
        end

        r.name = id
        r.root_model = r.root_model or id
        db.routes[id] = r

        if db.names[id] and db.names[id] ~= id then
            return nil, "routes file: " .. id .. " is a model and an alias"
        end
        db.names[id] = id
    end

    for id, r in pairs(db.routes) do
        for _, a in ipairs(r.aliases or {}) do
            if db.names[a] and db.names[a] ~= id then
                return nil, "routes file: alias " .. a
                            .. " names two models"
            end
            db.names[a] = id
        end
    end

    if t.default ~= nil then
        local ok, err = check_route("routes file: default", t.default)
        if not ok then
            return nil, err
        end
        if t.default.aliases then
            return nil, "routes file: default cannot have aliases"
        end
        t.default.name = "*"
        t.default.root_model = t.default.root_model or ""
        db.default = t.default
    end

    for name in pairs(db.names) do
        db.ids[#db.ids + 1] = name
    end
    table.sort(db.ids)

    return db
end


local function load(conf)
    local path = conf.routes_file
    if path == nil or path == "" then
        return false
    end

    local db, err = filecache.get(path, _M.parse)
    if db == nil then
        return nil, {
            status = 503, type = "server_error", code = "routes_unavailable",
            message = "The routing table is not available.",
            headers = { ["Retry-After"] = "5" },
        }
    end

    return db
end


-- may the tenant use route id (a canonical name, or "*" for default)?
local function allowed(db, tenant, id)
    local list = tenant.models
    if list == nil then
        return true
    end

    for _, m in ipairs(list) do
        if m == "*" then
            if id == "*" then
                return true
            end
        elseif db.names[m] == id then
            return true
        end
    end

    return false
end


local function not_found(model, param)
    return {
        status = 404, type = "invalid_request_error",
        code = "model_not_found", param = param or "model",
        message = "The model '" .. tostring(model) .. "' does not exist"
                  .. " or you do not have access to it.",
    }
end


-- resolve(conf, model, tenant [, param]) -> route | nil, err
-- route = { name, provider, root_model, sub_model, max_iterations,
--           max_depth, timeout } (strings "" = the C side's default;
-- limits nil = none).  With routing off: a route with no limits.
function _M.resolve(conf, model, tenant, param)
    local db, err = load(conf)
    if db == nil then
        return nil, err
    end

    if db == false then
        return { name = model, provider = "", root_model = "",
                 sub_model = "", off = true, prices = "" }
    end

    local id = db.names[model]
    local r

    if id then
        r = db.routes[id]
    else
        id = "*"
        r = db.default
    end

    if r == nil or not allowed(db, tenant, id) then
        return nil, not_found(model, param)
    end

    return {
        name = id,
        provider = r.provider or "",
        root_model = r.root_model,
        sub_model = r.sub_model or "",
        max_iterations = r.max_iterations,
        max_depth = r.max_depth,
        timeout = r.timeout,
        max_cost = r.max_cost,
        compaction_threshold = r.compaction_threshold,
        system_prompt = r.system_prompt == true,
        prices = db.prices,
    }
end


-- code_models(conf, route, tenant, model, sub) -> "name name ..."
-- The names code of a completion on this route may pass as `model`
-- (llm_query(p, model=...), rlm_query ...), for the C directive
-- rlm_completion_code_models: the route's root model (the client's
-- `model` on the default route) and sub model (`sub`, as the policy
-- resolved it), and the root and sub models of every other route the
-- tenant may use that goes to the same provider.  The C side sends the
-- name code gives to that provider as it is (ngx_http_rlm_subcall.c),
-- so these are upstream model names: a route's id or alias is listed
-- only when it is also its upstream name, and routes of other
-- providers are left out.  A name with a space or a comma cannot be
-- listed.  "" with routing off: C then allows the root and sub model.
function _M.code_models(conf, route, tenant, model, sub)
    local db = load(conf)
    if not db or route.off then
        return ""
    end

    local seen, out = {}, {}

    local function add(name)
        if type(name) == "string" and name ~= "" and not seen[name]
           and not name:find("[%s,]")
        then
            seen[name] = true
            out[#out + 1] = name
        end
    end

    add(route.root_model ~= "" and route.root_model or model)
    add(sub)

    local function same(r, id)
        return (r.provider or "") == route.provider
               and allowed(db, tenant, id)
    end

    for id, r in pairs(db.routes) do
        if same(r, id) then
            add(r.root_model)
            add(r.sub_model)
        end
    end

    if db.default and same(db.default, "*") then
        add(db.default.root_model)
        add(db.default.sub_model)
    end

    table.sort(out)

    return table.concat(out, " ")
end


-- list(conf, tenant) -> { {id =, created =, owned_by =}, ... } | nil, err
-- Ids and aliases the tenant may use, sorted.  The default route has
-- no id of its own and is not listed.
function _M.list(conf, tenant)
    local db, err = load(conf)
    if db == nil then
        return nil, err
    end

    local out = {}
    if db == false then
        return out
    end

    for _, name in ipairs(db.ids) do
        local id = db.names[name]
        if allowed(db, tenant, id) then
            local r = db.routes[id]
            out[#out + 1] = {
                id = name,
                created = r.created or 0,
                owned_by = r.owned_by or (r.provider ~= nil and r.provider
                                          ~= "" and r.provider) or "rlm",
            }
        end
    end

    return out
end


return _M
