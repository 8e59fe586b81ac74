-- rlm.models: GET /v1/models, the models (ids and aliases) of the routing
-- table that the caller's tenant may use, in OpenAI's list format:
--
--     {"object":"list","data":[{"id":"fast","object":"model",
--       "created":1721172741,"owned_by":"openai"}, ...]}
--
-- and GET /v1/models/{id}, one of them as its object, or nil when the
-- tenant may not use it or it does not exist (the caller answers 404).

local cjson = require "cjson.safe"
local routing = require "rlm.routing"

local _M = {}


-- body(conf, tenant [, routing module]) -> JSON text | nil, err
function _M.body(conf, tenant, router)
    local list, err = (router or routing).list(conf, tenant)
    if list == nil then
        return nil, err
    end

    local data = {}
    for i, m in ipairs(list) do
        data[i] = { id = m.id, object = "model", created = m.created,
                    owned_by = m.owned_by }
    end

    local text = cjson.encode({ object = "list", data = data })
    if #data == 0 then
        -- lua-cjson writes an empty table as {}
        text = '{"object":"list","data":[]}'
    end

    return text
end


-- one(conf, tenant, id [, routing module]) -> JSON text | nil, err
-- (nil, nil: no such model for this tenant)
function _M.one(conf, tenant, id, router)
    local list, err = (router or routing).list(conf, tenant)
    if list == nil then
        return nil, err
    end

    for _, m in ipairs(list) do
        if m.id == id then
            return cjson.encode({ id = m.id, object = "model",
                                  created = m.created,
                                  owned_by = m.owned_by })
        end
    end

    return nil
end


return _M
