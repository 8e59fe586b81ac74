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
--
-- Health: the first request a worker serves starts a timer that asks each
-- node's /healthz every `interval` seconds (one worker per round, a
-- lock in the shared dict), with a short timeout.  Any HTTP answer means
-- the node's nginx is alive; no answer `down_after` times in a row marks
-- it down (lua_shared_dict rlm_cluster).  forward() answers a request
-- for a node marked down with node_unavailable at once, and asks the
-- node itself first when its last good answer is older than `stale`
-- seconds.  So a stopped owner (it accepts connections, the kernel does
-- that, but never answers) costs a few seconds, not proxy_read_timeout.
--
-- list(): GET /v1/sessions on a node of a cluster asks every node for
-- the caller's sessions (the client's own Authorization and cookie,
-- X-RLM-Forwarded so that each answers for itself), merges them and
-- names the nodes that did not answer in time.

local errors = require "rlm.errors"

local _M = { _VERSION = "0.1.0" }

local conf = {
    nodes = {},
    probe = {},              -- node -> host:port of its /healthz
    retry_after = 5,
    body_peek = 64 * 1024,   -- a creation body read for its "id", at most
    interval = 1,            -- seconds between two probes of a node
    probe_timeout = 2,       -- seconds a probe waits for an answer
    down_after = 2,          -- probes without an answer: marked down
    stale = 3,               -- older last answer: probe before forwarding
    list_timeout = 5,        -- seconds a node has to list its sessions
    shared_dict = "rlm_cluster",
}

local KNOWN = { nodes = "table", probe = "table", retry_after = "number",
                body_peek = "number", interval = "number",
                probe_timeout = "number", down_after = "number",
                stale = "number", list_timeout = "number",
                shared_dict = "string" }


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
    if type(opts.probe) == "string" then
        opts.probe = parse_nodes(opts.probe)
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

    local probe = {}
    for id, addr in pairs(opts.probe or conf.probe) do
        local n = tonumber(id)
        if n == nil or nodes[n] == nil or type(addr) ~= "string"
           or not addr:find("^[^%s/]+:%d+$")
        then
            error("rlm.cluster.configure: probe: [" .. tostring(id)
                  .. "] = " .. tostring(addr)
                  .. ": want a node of `nodes` and a host:port", 2)
        end
        probe[n] = addr
    end

    -- a node given as host:port is probed there; one given as the name
    -- of an upstream{} needs `probe` (a timer cannot use upstream{})
    for n, addr in pairs(nodes) do
        if probe[n] == nil and addr:find("^[^%s/]+:%d+$") then
            probe[n] = addr
        end
    end

    for k, v in pairs(opts) do
        conf[k] = v
    end
    conf.nodes = nodes
    conf.probe = probe
end


-- health of the nodes -------------------------------------------------

local function dict()
    local d = ngx.shared[conf.shared_dict]
    if d == nil then
        error("rlm.cluster: lua_shared_dict " .. conf.shared_dict
              .. " is missing (conf/cluster.conf declares it)")
    end
    return d
end


local function split_addr(addr)
    local host, port = addr:match("^(.+):(%d+)$")
    if host and host:sub(1, 1) == "[" then
        host = host:sub(2, -2)
    end
    return host, tonumber(port)
end


-- one HTTP/1.0 request to a node -> status, body; nil, err when the node
-- did not answer within `timeout` seconds
local function ask(addr, uri, headers, timeout)
    local host, port = split_addr(addr)
    local sock = ngx.socket.tcp()
    local ms = math.floor(timeout * 1000)
    sock:settimeouts(ms, ms, ms)

    local ok, err = sock:connect(host, port)
    if not ok then
        return nil, err
    end

    local req = { "GET ", uri, " HTTP/1.0\r\nHost: ", addr, "\r\n" }
    for name, value in pairs(headers or {}) do
        req[#req + 1] = name .. ": " .. value .. "\r\n"
    end
    req[#req + 1] = "\r\n"

    ok, err = sock:send(req)
    if not ok then
        sock:close()
        return nil, err
    end

    local line
    line, err = sock:receive("*l")
    local status = line and tonumber(line:match("^HTTP/1%.%d (%d%d%d)"))
    if status == nil then
        sock:close()
        return nil, err or "not HTTP"
    end

    if uri == "/healthz" then
        sock:close()
        return status
    end

    repeat
        line, err = sock:receive("*l")
        if line == nil then
            sock:close()
            return nil, err
        end
    until line == ""

    local body
    body, err = sock:receive("*a")
    sock:close()
    if body == nil then
        return nil, err
    end
    return status, body
end


-- a probe's outcome, in the shared state of every worker
local function record(node, alive)
    local d = dict()
    if alive then
        d:set("ok:" .. node, ngx.now())
        d:set("fails:" .. node, 0)
        if d:get("down:" .. node) then
            d:delete("down:" .. node)
            ngx.log(ngx.WARN, "rlm.cluster: node ", node, " (",
                    conf.probe[node], ") answers again")
        end
        return
    end

    local fails = d:incr("fails:" .. node, 1, 0)
    if fails and fails >= conf.down_after and not d:get("down:" .. node)
    then
        d:set("down:" .. node, true)
        ngx.log(ngx.WARN, "rlm.cluster: node ", node, " (",
                conf.probe[node], ") marked down: no answer to ",
                fails, " probes")
    end
end


local function probe(node)
    local status, err = ask(conf.probe[node], "/healthz", nil,
                            conf.probe_timeout)
    if status == nil then
        ngx.log(ngx.INFO, "rlm.cluster: probe of node ", node, ": ", err)
    end
    record(node, status ~= nil)
    return status ~= nil
end


local self_id    -- this node, not probed (set by start())

local function tick(premature)
    if premature then
        return
    end

    local d = dict()
    local threads = {}
    for node in pairs(conf.probe) do
        -- one worker per round probes a node; not this one
        if node ~= self_id
           and d:add("lock:" .. node, true, conf.interval * 0.9)
        then
            threads[#threads + 1] = ngx.thread.spawn(probe, node)
        end
    end
    for _, t in ipairs(threads) do
        ngx.thread.wait(t)
    end
end


-- the probes of this worker, started by its first request on a node of a
-- cluster (not in init_worker: an operator's configuration may have its
-- own init_worker_by_lua, and nginx takes one only)
local started = false

local function start(self)
    if started or next(conf.probe) == nil then
        return
    end
    started = true
    self_id = self
    local ok, err = ngx.timer.every(conf.interval, tick)
    if not ok then
        ngx.log(ngx.ERR, "rlm.cluster: no probe timer: ", err)
    end
end


-- alive(node): false when the node is marked down or does not answer a
-- probe now; true when it answered lately (or cannot be probed)
local function alive(node)
    if conf.probe[node] == nil then
        return true
    end

    local d = dict()
    if d:get("down:" .. node) then
        return false
    end

    local ok = d:get("ok:" .. node)
    if ok and ngx.now() - ok <= conf.stale then
        return true
    end

    return probe(node)
end


-- the state of every node as this worker sees it (tests, debugging):
-- { [id] = "up" | "down" | "unknown" }
function _M.health()
    local d = dict()
    local t = {}
    for node in pairs(conf.nodes) do
        if d:get("down:" .. node) then
            t[node] = "down"
        elseif d:get("ok:" .. node) then
            t[node] = "up"
        else
            t[node] = "unknown"
        end
    end
    return t
end


-- the node a session id names, nil for a malformed id
local function node_of(id)
    if type(id) ~= "string" or #id ~= 32 or id:find("[^0-9a-f]") then
        return nil
    end
    return tonumber(id:sub(1, 2), 16)
end


-- the request's JSON body as a table, if it is at most body_peek bytes
local function peek_body()
    local len = tonumber(ngx.var.http_content_length or "")
    if len == nil or len == 0 or len > conf.body_peek then
        return nil
    end

    ngx.req.read_body()
    local body = ngx.req.get_body_data()
    if body == nil then
        return nil
    end

    local req = require("cjson.safe").decode(body)
    if type(req) ~= "table" then
        return nil
    end
    return req
end


-- a client-chosen "id" in the body of POST /v1/sessions, if small
local function created_id()
    local req = peek_body()
    if req == nil or type(req.id) ~= "string" then
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

    start(self)

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

    if not alive(node) then
        return _M.down()
    end

    ngx.req.set_header(HEADER, tostring(self))

    -- a streamed completion hears from the owner every 10 s (the SSE
    -- keep-alive comment), so it can be given up on sooner
    if ngx.var.uri == "/v1/chat/completions" then
        local req = peek_body()
        if req and req.stream == true then
            return ngx.exec("@rlm_forward_stream")
        end
    end

    return ngx.exec("@rlm_forward")
end


-- GET /v1/sessions: the caller's sessions on every node ---------------

local function list_node(node, self, headers)
    if node ~= self and not alive(node) then
        return nil
    end

    local status, body = ask(conf.probe[node], "/v1/sessions", headers,
                             conf.list_timeout)
    if status == nil then
        ngx.log(ngx.WARN, "rlm.cluster: node ", node,
                " did not list its sessions: ", body)
        return nil
    end

    local res = require("cjson.safe").decode(body)
    if status ~= 200 or type(res) ~= "table" or type(res.data) ~= "table"
    then
        return nil, status, body
    end
    return res.data
end


-- list(): in the access phase of /v1/sessions, before forward(); answers
-- GET /v1/sessions on a node of a cluster and returns otherwise
function _M.list()
    local self = tonumber(ngx.var.rlm_node_id or "")
    if self == nil or ngx.var.http_x_rlm_forwarded
       or ngx.req.get_method() ~= "GET"
       or (ngx.var.uri ~= "/v1/sessions" and ngx.var.uri ~= "/v1/sessions/")
       or conf.probe[self] == nil
    then
        return    -- served here: one node, or this node's own part
    end

    start(self)
    require("rlm.policy").authenticate()

    local h = ngx.req.get_headers()
    local headers = { [HEADER] = tostring(self) }
    for _, name in ipairs({ "authorization", "cookie" }) do
        local v = h[name]
        if type(v) == "table" then
            v = v[1]
        end
        if v then
            headers[name] = v
        end
    end

    local ids, threads = {}, {}
    for node in pairs(conf.probe) do
        ids[#ids + 1] = node
    end
    table.sort(ids)
    for i, node in ipairs(ids) do
        threads[i] = ngx.thread.spawn(list_node, node, self, headers)
    end

    local data, missing = {}, {}
    for i, node in ipairs(ids) do
        local _, part, status, body = ngx.thread.wait(threads[i])
        if node == self and part == nil and status then
            -- this node's own refusal (a rate limit, ...) is the answer
            ngx.status = status
            ngx.header["Content-Type"] = "application/json"
            ngx.print(body)
            return ngx.exit(ngx.HTTP_OK)
        end
        if part == nil then
            missing[#missing + 1] = node
        else
            for _, s in ipairs(part) do
                data[#data + 1] = s
            end
        end
    end

    -- most recently used first, as on one node
    table.sort(data, function(a, b)
        return (tonumber(a.last_used) or 0) > (tonumber(b.last_used) or 0)
    end)

    -- by hand: this cjson writes an empty table as {}
    local encode = require("cjson.safe").encode
    for i, s in ipairs(data) do
        data[i] = encode(s)
    end
    ngx.status = ngx.HTTP_OK
    ngx.header["Content-Type"] = "application/json"
    ngx.print('{"object":"list","data":[', table.concat(data, ","),
              '],"unavailable_nodes":[', table.concat(missing, ","), ']}')
    return ngx.exit(ngx.HTTP_OK)
end


-- down(): the answer when the owner cannot be reached
function _M.down()
    local node = ngx.var.rlm_forward_node or "?"
    ngx.log(ngx.WARN, "rlm.cluster: node ", node, " (",
            ngx.var.rlm_forward_to or "", ") did not answer: upstream ",
            ngx.var.upstream_status or "-")
    if tonumber(node) and ngx.var.upstream_status then
        record(tonumber(node), false)
    end
    return errors.send(errors.new(503, "server_error", "node_unavailable",
        "The node that holds this session (node " .. node .. ") is not "
        .. "answering. Retry later; if it restarted, the session is gone.",
        nil, { ["Retry-After"] = tostring(conf.retry_after) }))
end


-- owner_of(id): the node and address of a session id that names another
-- known node of the cluster, or nil (one node, this node, a malformed id
-- or an unknown node); for resty.rlm, which does not forward
function _M.owner_of(id)
    local self = tonumber(ngx.var.rlm_node_id or "")
    local node = node_of(id)
    if self == nil or node == nil or node == self
       or conf.nodes[node] == nil
    then
        return nil
    end
    return node, conf.probe[node] or conf.nodes[node]
end


-- the settings in force (tests, debugging)
function _M.nodes()
    return conf.nodes
end


return _M
