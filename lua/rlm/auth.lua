-- rlm.auth: API keys -> tenants.
--
-- Off unless a keys file is configured (policy.configure{ keys_file = },
-- or `set $rlm_keys_file /path;` in the server/location, which wins).
-- With auth off every request belongs to the tenant "" (no limits).
--
-- Keys file: one key per line, `#` starts a comment:
--
--     # key                     tenant  options
--     sk-acme-4f1c9a0b2e7d      acme    rate=10/s concurrency=4
--     sk-acme-second-key-99     acme    max_sessions=20
--     sk-globex-77aa01bd9e3c    globex  rate=100/m models=gpt-4o-mini,fast
--
-- Options (all optional) describe the tenant, so they merge across the
-- lines of one tenant (a later line overrides the same option):
--   rate=N/s | N/m | N/h    requests per second / minute / hour
--   concurrency=N           completions running at once
--   max_sessions=N          live sessions (POST /v1/sessions)
--   models=a,b,...          models (names or aliases) the tenant may use;
--                           "*" also allows the routing table's default
--   max_cost=X              money the tenant's completions may spend on
--                           this node (rlm.limits.cost_left), in the
--                           routing table's prices' currency
--
-- A key is at least 12 printable characters without spaces; a tenant
-- name is 1-64 of [A-Za-z0-9._-].  A malformed line is skipped and
-- logged by line number only: keys never reach the log.
--
-- The file is re-read when it changes (checked at most once a second per
-- worker, see rlm.filecache) and on nginx reload.

local filecache = require "rlm.filecache"

local sha1_bin = ngx.sha1_bin
local byte = string.byte
local bit = require "bit"

local bxor = bit.bxor
local bor = bit.bor
local tonumber = tonumber

local _M = {}

local MIN_KEY = 12

local RATE_UNITS = { s = 1, m = 60, h = 3600 }


local function parse_option(tenant, opt)
    local name, value = opt:match("^([%w_]+)=(.+)$")
    if not name then
        return nil, "option without '='"
    end

    if name == "rate" then
        local n, unit = value:match("^(%d+)/([smh])$")
        n = tonumber(n)
        if not n or n < 1 then
            return nil, "rate must be N/s, N/m or N/h with N >= 1"
        end
        tenant.rate = n
        tenant.rate_window = RATE_UNITS[unit]
        return true
    end

    if name == "concurrency" or name == "max_sessions" then
        local n = tonumber(value:match("^%d+$"))
        if not n or n < 1 then
            return nil, name .. " must be a positive integer"
        end
        tenant[name] = n
        return true
    end

    if name == "max_cost" then
        local n = value:match("^%d+%.?%d*$") and tonumber(value)
        if not n or n <= 0 then
            return nil, "max_cost must be a positive number"
        end
        tenant.max_cost = n
        return true
    end

    if name == "models" then
        local list = {}
        for m in value:gmatch("[^,]+") do
            list[#list + 1] = m
        end
        if #list == 0 then
            return nil, "empty models list"
        end
        tenant.models = list
        return true
    end

    return nil, "unknown option " .. name
end


-- text -> { keys = { [sha1(key)] = { key =, tenant = } },
--           tenants = { [name] = tenant } }
function _M.parse(text)
    local keys, tenants = {}, {}
    local lineno = 0
    local bad = 0

    for line in (text .. "\n"):gmatch("([^\n]*)\n") do
        lineno = lineno + 1
        line = line:gsub("#.*$", "")

        local fields = {}
        for f in line:gmatch("%S+") do
            fields[#fields + 1] = f
        end

        if #fields > 0 then
            local key, name = fields[1], fields[2]
            local why

            if #key < MIN_KEY or key:find("[%c\128-\255]") then
                why = "key shorter than " .. MIN_KEY
                      .. " characters or not printable ASCII"
            elseif name == nil or #name > 64 or name:find("[^%w._-]") then
                why = "missing or malformed tenant name"
            end

            -- options go into a scratch copy first: a line with one bad
            -- option changes nothing
            local opts = {}
            local i = 3
            while why == nil and fields[i] do
                local ok, err = parse_option(opts, fields[i])
                if not ok then
                    why = err
                end
                i = i + 1
            end

            if why == nil then
                local hash = sha1_bin(key)
                if keys[hash] then
                    why = "duplicate key (first one kept)"
                end
            end

            if why then
                bad = bad + 1
                ngx.log(ngx.ERR, "rlm policy: keys file line ", lineno,
                        " skipped: ", why)
            else
                local tenant = tenants[name]
                if tenant == nil then
                    tenant = { id = name }
                    tenants[name] = tenant
                end
                for k, v in pairs(opts) do
                    tenant[k] = v
                end
                keys[sha1_bin(key)] = { key = key, tenant = tenant }
            end
        end
    end

    return { keys = keys, tenants = tenants, skipped = bad }
end


-- Compares every byte of the stored key, so the time taken does not say
-- how long a prefix of a guess was right.  (The table lookup before it
-- is keyed by a SHA-1 of the presented key, which tells an attacker
-- nothing about the stored one.)
local function same_key(stored, presented)
    if #stored ~= #presented then
        return false
    end

    local diff = 0
    for i = 1, #stored do
        diff = bor(diff, bxor(byte(stored, i), byte(presented, i)))
    end

    return diff == 0
end


local function refuse(etype, message)
    return {
        status = 401, type = etype, code = "invalid_api_key",
        message = message, headers = { ["WWW-Authenticate"] = "Bearer" },
    }
end


local OFF = { id = "" }


-- authenticate(conf) -> tenant | nil, err
-- tenant = { id = "acme", rate =, rate_window =, concurrency =,
--            max_sessions =, models = }; { id = "" } when auth is off.
function _M.authenticate(conf)
    local path = conf.keys_file
    if path == nil or path == "" then
        return OFF
    end

    local db, err = filecache.get(path, _M.parse)
    if db == nil then
        return nil, {
            status = 503, type = "server_error", code = "auth_unavailable",
            message = "API keys are not available: " .. tostring(err),
            headers = { ["Retry-After"] = "5" },
        }
    end

    local header = ngx.var.http_authorization
    if header == nil or header == "" then
        return nil, refuse("invalid_request_error",
                           "Missing API key. Send it in the Authorization"
                           .. " header as 'Bearer <key>'.")
    end

    local presented = header:match("^[Bb][Ee][Aa][Rr][Ee][Rr] +(%S+) *$")
    if presented == nil then
        return nil, refuse("invalid_request_error",
                           "The Authorization header must be"
                           .. " 'Bearer <key>'.")
    end

    local entry = db.keys[sha1_bin(presented)]
    if entry == nil or not same_key(entry.key, presented) then
        -- the message never echoes the key
        return nil, refuse("authentication_error",
                           "Incorrect API key provided.")
    end

    return entry.tenant
end


return _M
