-- rlm.limits: per-tenant request rate, concurrent completions and live
-- sessions, shared by all workers through a lua_shared_dict (default
-- name "rlm_policy", see conf/policy.conf).
--
-- Rate: a window of `rate_window` seconds opens at a tenant's first
-- request and admits `rate` requests; the window's counter is a key with
-- a TTL, so it is atomic across workers (incr) and needs no cleanup.
-- A refused request gets 429 with Retry-After = seconds left in the
-- window.  Bursts of up to 2x the rate across a window boundary are
-- possible (fixed window, not a sliding one).
--
-- Concurrency: a per-tenant counter taken in the access phase and given
-- back in the log phase (rlm.policy.log, which conf/policy-server.conf
-- runs for every request of its server), also after an internal
-- redirect.  If a worker
-- dies in between, its slots stay taken until nginx restarts.
--
-- Cost: a tenant with max_cost has a total in the dict ("cost:<tenant>")
-- that the log phase raises by $rlm_cost, what each completion spent
-- (rlm.policy.log -> spend).  It is per node (each node has its own
-- dict), lives as long as the dict (a reload keeps it, a restart starts
-- again at 0), and is read once when a completion starts: completions
-- that run at once each get all that is left, so the tenant can go over
-- by what they spend together.  At 0 left a completion gets 429
-- insufficient_quota before it starts.
--
-- Sessions: POST /v1/sessions asks the module how many sessions the
-- tenant has (GET <bridge prefix>/sessions as that owner, through
-- resty.rlm) plus the creations in flight; at `max_sessions` the answer
-- is 429.  Sessions that expire or are deleted stop counting at once,
-- because the module's own list is the source of truth.

local _M = {}


local function dict(conf)
    local name = conf.shared_dict or "rlm_policy"
    local d = ngx.shared[name]
    if d == nil then
        error("rlm policy: lua_shared_dict " .. name .. " is not declared"
              .. " (include conf/policy.conf at http level)")
    end
    return d
end


local function too_many(code, message, retry_after)
    return {
        status = 429, type = "rate_limit_error", code = code,
        message = message,
        headers = { ["Retry-After"] = tostring(retry_after) },
    }
end


-- rate(conf, tenant) -> true | nil, err
function _M.rate(conf, tenant)
    if not tenant.rate then
        return true
    end

    local d = dict(conf)
    local key = "rate:" .. tenant.id
    local n, err = d:incr(key, 1, 0, tenant.rate_window)
    if n == nil then
        ngx.log(ngx.ERR, "rlm policy: rate counter: ", err)
        return true
    end

    if n <= tenant.rate then
        return true
    end

    local left = d:ttl(key) or tenant.rate_window
    left = math.max(1, math.ceil(left))

    return nil, too_many("rate_limit_exceeded",
                         "Rate limit reached for tenant '" .. tenant.id
                         .. "': " .. tenant.rate .. " requests per "
                         .. tenant.rate_window .. " s. Try again in "
                         .. left .. " s.", left)
end


-- The slots a request holds are listed, one per line, in the variable
-- $rlm_policy_held (declared by conf/policy.conf), not in ngx.ctx: nginx
-- wipes ngx.ctx on an internal redirect (error_page, try_files), and the
-- log phase would then never give the slot back.  Without the variable
-- (policy.conf not included) ngx.ctx is the fallback.
local function held_read()
    local v = ngx.var.rlm_policy_held
    if v ~= nil then
        return v, true
    end
    return ngx.ctx.rlm_policy_held or "", false
end


local function held_write(v, in_var)
    if in_var then
        ngx.var.rlm_policy_held = v
    else
        ngx.ctx.rlm_policy_held = v
    end
end


-- take(conf, tenant, what) -> count after taking | nil
-- `what` names the counter ("running" or "creating"); release() gives
-- the slot back.
local function take(conf, tenant, what)
    local d = dict(conf)
    local key = what .. ":" .. tenant.id
    local n, err = d:incr(key, 1, 0)
    if n == nil then
        ngx.log(ngx.ERR, "rlm policy: ", what, " counter: ", err)
        return nil
    end

    local held, in_var = held_read()
    held_write(held .. key .. "\n", in_var)

    return n
end


local function give_back(conf, key)
    local d = dict(conf)
    local n = d:incr(key, -1, 0)
    if n and n <= 0 then
        d:delete(key)
    end
end


function _M.concurrency(conf, tenant)
    if not tenant.concurrency then
        return true
    end

    local n = take(conf, tenant, "running")
    if n == nil or n <= tenant.concurrency then
        return true
    end

    _M.release(conf)

    return nil, too_many("concurrency_limit_exceeded",
                         "Tenant '" .. tenant.id .. "' already has "
                         .. tenant.concurrency .. " completions running."
                         .. " Try again when one has finished.", 1)
end


-- sessions(conf, tenant) -> true | nil, err  (POST /v1/sessions only)
function _M.sessions(conf, tenant)
    if not tenant.max_sessions then
        return true
    end

    local in_flight = take(conf, tenant, "creating") or 1

    local rlm = require "resty.rlm"
    local list, err = rlm.session_list({ owner = tenant.id })
    if list == nil then
        _M.release(conf)
        ngx.log(ngx.ERR, "rlm policy: counting sessions of tenant ",
                tenant.id, ": ", err)
        return nil, {
            status = 503, type = "server_error", code = "policy_unavailable",
            message = "Cannot count the tenant's sessions right now.",
            headers = { ["Retry-After"] = "1" },
        }
    end

    -- this request is one of the in-flight creations
    if #list.data + in_flight - 1 < tenant.max_sessions then
        return true
    end

    _M.release(conf)

    return nil, too_many("session_limit_exceeded",
                         "Tenant '" .. tenant.id .. "' has reached its"
                         .. " limit of " .. tenant.max_sessions
                         .. " sessions. Delete one first.", 1)
end


-- cost_left(conf, tenant) -> money left (may be <= 0), or nil: no budget
function _M.cost_left(conf, tenant)
    if not tenant.max_cost then
        return nil
    end

    local spent = dict(conf):get("cost:" .. tenant.id) or 0
    return tenant.max_cost - spent
end


-- the refusal when nothing is left
function _M.cost_spent(tenant)
    return {
        status = 429, type = "insufficient_quota",
        code = "insufficient_quota",
        message = "Tenant " .. tenant.id .. " has spent its cost budget"
                  .. " (max_cost) on this server.",
    }
end


-- spend(conf): adds what this request's completion cost ($rlm_cost) to
-- its tenant's total (log phase)
function _M.spend(conf)
    local ok, cost = pcall(function() return ngx.var.rlm_cost end)
    cost = ok and tonumber(cost)
    if not cost or cost <= 0 then
        return
    end

    local tenant = ngx.var.rlm_tenant
    if tenant == nil or tenant == "" then
        return
    end

    local _, err = dict(conf):incr("cost:" .. tenant, cost, 0)
    if err then
        ngx.log(ngx.ERR, "rlm policy: cost total: ", err)
    end
end


-- release(conf): gives back every slot this request holds (log phase;
-- also used when a later check refuses the request).
function _M.release(conf)
    local held, in_var = held_read()
    if held == "" then
        return
    end

    held_write("", in_var)

    for key in held:gmatch("([^\n]+)\n") do
        give_back(conf, key)
    end
end


return _M
