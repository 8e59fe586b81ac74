-- policy_echo: stands in for the C completions handler in t/lua_policy.t.
-- It answers what the handler would read: the policy's variables and the
-- request body (from memory or from the temporary file), as JSON.
--   X-Echo-Sleep: seconds to wait first (concurrency tests)

local cjson = require "cjson.safe"

local _M = {}


function _M.serve()
    local pause = tonumber(ngx.var.http_x_echo_sleep)
    if pause then
        ngx.sleep(pause)
    end

    ngx.req.read_body()
    local raw = ngx.req.get_body_data()
    local where = "memory"

    if raw == nil then
        local path = ngx.req.get_body_file()
        if path then
            where = "file"
            local f = assert(io.open(path, "rb"))
            raw = f:read("*a")
            f:close()
        end
    end

    ngx.header["Content-Type"] = "application/json"
    ngx.say(cjson.encode({
        tenant = ngx.var.rlm_tenant,
        route = ngx.var.rlm_route,
        provider = ngx.var.rlm_provider,
        root_model = ngx.var.rlm_root_model,
        sub_model = ngx.var.rlm_sub_model,
        body_in = where,
        content_length = ngx.var.http_content_length or cjson.null,
        raw = raw or cjson.null,
    }))
end


return _M
