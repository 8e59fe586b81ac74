-- rlm.cluster: several nodes sharing sessions (docs/cluster.md).
--
-- A session lives on the node that made it.  With `rlm_node_id N;` the
-- module makes every id start with N in two hex digits, so any node can
-- tell the owner of a session from its id.  forward(), first thing in
-- the access phase of the session and completion locations, hands a
-- request for another node's session to that node with nginx's proxy
-- module (the named location @rlm_forward of conf/cluster-forward.conf):
--
--     init_by_lua_block {
--         require("rlm.cluster").configure{
--             nodes = { [0] = "10.0.0.10:8080",   -- host:port, or the
--                       [1] = "rlm_node_1",       -- name of an upstream{}
--                       [2] = "rlm-2.rlm:8080" }, -- (a name: resolver)
--         }
--     }
--     location /v1/sessions {
--         access_by_lua_block {
--             require("rlm.cluster").forward()
--             require("rlm.policy").access()
--         }
--         ...
--     }
--
-- Which requests go elsewhere:
--   /v1/sessions/{id}[/...] (trajectories included): the id's node;
--   POST /v1/chat/completions with X-RLM-Session-Id, else the
--     rlm_session cookie: that session's node;
--   POST /v1/sessions with a client-chosen "id": the node it names;
--   anything else (a new session, /v1/models, ...): served here.
-- An id naming this node, a node not in `nodes`, a malformed id, or a
-- request that already carries X-RLM-Forwarded (the loop guard) is
-- served here, and the C handlers answer as on a single node.
--
-- Auth: this node checks the API key (the policy's auth alone: no rate,
-- no limits, so a request counts once, where it runs) and forwards the
-- request as it came, Authorization included; the owner runs the whole
-- policy again.  Nothing is trusted because it came from a peer:
-- X-RLM-Forwarded only stops a second hop.
--
-- down(): the content of @rlm_node_down, where @rlm_forward's 502 and 504
-- (the owner refused the connection or did not answer) go: 503
-- node_unavailable in the OpenAI envelope, with Retry-After.

local errors = require "rlm.errors"

local _M = { _VERSION = "0.1.0" }

local conf = {
    nodes = {},
    retry_after = 5,
    body_peek = 64 * 1024,   -- a creation body read for its "id", at most
}

local KNOWN = { nodes = "table", retry_after = "number",
                body_peek = "number" }


-- "0=host:port 1=host:port ..." (RLM_NODES) -> { [0] = "host:port", ... }
local function parse_nodes(text)
    local t = {}
    for word in text:gmatch("%S+") do
        local id, addr = word:match("^(%d+)=(.+)$")
        if id == nil then
            error("rlm.cluster.configure: nodes: '" .. word
                  .. "': want id=host:port", 3)
        end
        t[tonumber(id)] = addr
    end
    return t
end

local HEADER = "X-RLM-Forwarded"


-- configure{ nodes = { [id] = "host:port" | "upstream name" }, ... };
-- nodes may also be a string "0=host:port 1=host:port ..."
function _M.configure(opts)
    opts = opts or {}
    if type(opts.nodes) == "string" then
        opts.nodes = parse_nodes(opts.nodes)
    end

    for k, v in pairs(opts) do
        if KNOWN[k] == nil then
            error("rlm.cluster.configure: unknown option " .. tostring(k), 2)
        end
        if type(v) ~= KNOWN[k] then
            error("rlm.cluster.configure: " .. k .. " must be a " .. KNOWN[k],
                  2)
        end
    end

    local nodes = {}
    for id, addr in pairs(opts.nodes or conf.nodes) do
        local n = tonumber(id)
        if n == nil or n < 0 or n > 255 or n % 1 ~= 0
           or type(addr) ~= "string" or addr == ""
           or addr:find("[%s/]")
        then
            error("rlm.cluster.configure: nodes: [" .. tostring(id)
                  .. "] = " .. tostring(addr)
                  .. ": want a node id 0..255 and a host:port", 2)
        end
        nodes[n] = addr
    end

    for k, v in pairs(opts) do
        conf[k] = v
    end
    conf.nodes = nodes
end


-- the node a session id names, nil for a malformed id
local function node_of(id)
    if type(id) ~= "string" or #id ~= 32 or id:find("[^0-9a-f]") then
        return nil
    end
    return tonumber(id:sub(1, 2), 16)
end


-- a client-chosen "id" in the body of POST /v1/sessions, if small
local function created_id()
    local len = tonumber(ngx.var.http_content_length or "")
    if len == nil or len == 0 or len > conf.body_peek then
        return nil
    end

    ngx.req.read_body()
    local body = ngx.req.get_body_data()
    if body == nil then
        return nil
    end

    local ok, req = pcall(require("cjson.safe").decode, body)
    if not ok or type(req) ~= "table" or type(req.id) ~= "string" then
        return nil
    end
    return req.id
end


-- the session a request names, or nil
local function session_of(uri, method)
    local id = uri:match("^/v1/sessions/([^/]+)")
    if id then
        return id
    end

    if uri == "/v1/chat/completions" then
        local h = ngx.req.get_headers()["x-rlm-session-id"]
        if type(h) == "table" then
            h = h[1]
        end
        return h or ngx.var.cookie_rlm_session
    end

    if method == "POST" and (uri == "/v1/sessions" or uri == "/v1/sessions/")
    then
        return created_id()
    end

    return nil
end


-- forward(): sends the request to the node that owns its session and
-- never returns then; returns (nothing) when this node serves it
function _M.forward()
    local self = tonumber(ngx.var.rlm_node_id or "")
    if self == nil then
        return    -- a single node
    end

    if ngx.var.http_x_rlm_forwarded then
        return    -- forwarded once already: served here, whatever the id
    end

    local node = node_of(session_of(ngx.var.uri, ngx.req.get_method()))
    if node == nil or node == self then
        return
    end

    local addr = conf.nodes[node]
    if addr == nil then
        return    -- no such node: the handler answers (404, 400)
    end

    -- the key is checked here too, so a bad one costs no hop
    require("rlm.policy").authenticate()

    ngx.var.rlm_forward_to = addr
    ngx.var.rlm_forward_node = tostring(node)
    ngx.req.set_header(HEADER, tostring(self))
    return ngx.exec("@rlm_forward")
end


-- down(): the answer when the owner cannot be reached
function _M.down()
    local node = ngx.var.rlm_forward_node or "?"
    ngx.log(ngx.WARN, "rlm.cluster: node ", node, " (",
            ngx.var.rlm_forward_to or "", ") did not answer: upstream ",
            ngx.var.upstream_status or "-")
    return errors.send(errors.new(503, "server_error", "node_unavailable",
        "The node that holds this session (node " .. node .. ") is not "
        .. "answering. Retry later; if it restarted, the session is gone.",
        nil, { ["Retry-After"] = tostring(conf.retry_after) }))
end


-- the settings in force (tests, debugging)
function _M.nodes()
    return conf.nodes
end


return _M
