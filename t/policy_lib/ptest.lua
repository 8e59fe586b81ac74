-- ptest: small helpers for the driver locations of t/lua_policy.t, on
-- top of rlmt (t/api_lib/rlmt.lua).

local rlmt = require "rlmt"
local cjson = require "cjson.safe"

local _M = {}


-- a valid chat request; `extra` fields are merged in (cjson.null removes)
function _M.chat(extra)
    local req = {
        model = "gpt-small",
        messages = { { role = "user", content = "hello" } },
    }
    for k, v in pairs(extra or {}) do
        if v == cjson.null then
            req[k] = nil
        else
            req[k] = v
        end
    end
    return req
end


local function headers(key, more)
    local h = { ["Content-Type"] = "application/json" }
    if key then
        h["Authorization"] = "Bearer " .. key
    end
    for k, v in pairs(more or {}) do
        h[k] = v
    end
    return h
end


-- POST /v1/chat/completions with a table (encoded) or a raw string
function _M.post(body, key, more)
    if type(body) == "table" then
        body = cjson.encode(body)
    end
    return assert(rlmt.http("POST", "/v1/chat/completions", body,
                            headers(key, more)))
end


function _M.get(path, key)
    return assert(rlmt.http("GET", path, nil, headers(key)))
end


-- one line for an answer: an error as "status code type param", a
-- pass-through as "200 tenant=.. provider=.. root=.. sub=.."
function _M.show(res)
    local j = res.json
    if res.status ~= 200 or type(j) ~= "table" or j.error then
        local e = type(j) == "table" and j.error or {}
        return res.status .. " " .. tostring(e.code) .. " " .. tostring(e.type)
               .. " param=" .. tostring(e.param)
    end
    return "200 tenant=" .. tostring(j.tenant) .. " route=" .. tostring(j.route)
           .. " provider=" .. tostring(j.provider)
           .. " root=" .. tostring(j.root_model)
           .. " sub=" .. tostring(j.sub_model)
end


-- the `rlm` object and max_tokens the handler would read, one line
function _M.shaped(res)
    local body = cjson.decode(res.json.raw or "") or {}
    local r = body.rlm
    local out = {}
    if type(r) == "table" then
        for _, k in ipairs({ "max_iterations", "max_depth", "timeout",
                             "sub_model" }) do
            if r[k] ~= nil then
                out[#out + 1] = k .. "=" .. tostring(r[k])
            end
        end
    end
    return "rlm{" .. table.concat(out, ",") .. "} max_tokens="
           .. tostring(body.max_tokens) .. " mct="
           .. tostring(body.max_completion_tokens)
end


_M.cjson = cjson
_M.rlmt = rlmt

return _M
