# lua/rlm/policy.lua and conf/policy.conf: auth, per-tenant limits,
# routing, request shaping and GET /v1/models.  The C completions handler
# is stood in for by t/policy_lib/policy_echo.lua, which answers what the
# handler would read: $rlm_tenant, $rlm_route, $rlm_provider,
# $rlm_root_model, $rlm_sub_model and the request body.

use FindBin;
use RlmTest 'no_plan';

our $Root = $RlmTest::Root;

$ENV{TEST_NGINX_RLM_SANDBOXD} ||= $ENV{RLM_SANDBOXD}
                                  || "$Root/build/bin/rlm-sandboxd";

master_on();
timeout(30);
no_shuffle();

# Every block gets the policy at http level, conf/policy-server.conf in
# its server unless its config says "# no policy-server.conf" and, unless
# its config says "# no policy locations", the three guarded locations.
our $Locations = <<'CONF';
    location = /v1/chat/completions {
        client_max_body_size 64m;
        access_by_lua_block { require("rlm.policy").access() }
        content_by_lua_block { require("policy_echo").serve() }
    }
    location = /v1/models {
        content_by_lua_block { require("rlm.policy").models() }
    }
CONF

add_block_preprocessor(sub {
    my $block = shift;
    my $http = $block->http_config // '';
    my $config = $block->config;

    $block->set_value('http_config',
        qq{    lua_package_path "$Root/lua/?.lua;$Root/t/api_lib/?.lua;}
        . qq{$Root/t/policy_lib/?.lua;;";\n}
        . qq{    include $Root/conf/policy.conf;\n} . $http);

    if (defined $config && $config !~ /#\s*no policy locations/) {
        $config = $Locations . $config;
    }
    if (defined $config && $config !~ /#\s*no policy-server\.conf/) {
        $config = qq{    include $Root/conf/policy-server.conf;\n} . $config;
    }
    $block->set_value('config', $config) if defined $config;
});

# nginx is up before its rlm-sandboxd is: TEST 14 waits (at most 10 s)
# until the manager answers on a health server of its own
sub main::wait_manager {
    require IO::Socket::UNIX;
    my $path = "$ENV{TEST_NGINX_SERVER_ROOT}/logs/health.sock";
    for (1 .. 100) {
        my $sock = IO::Socket::UNIX->new(Peer => $path);
        if ($sock) {
            print $sock "GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n";
            local $/;
            my $resp = <$sock> // '';
            close $sock;
            return 1 if $resp =~ /"manager":"reachable"/;
        }
        select(undef, undef, undef, 0.1);
    }
    return 0;
}

run_tests();

__DATA__

=== TEST 1: auth and routing off: tenant "", C defaults, body untouched
--- config
    location = /t {
        content_by_lua_block {
            local p = require "ptest"
            local raw = '{"model":"any-model","messages":[{"role":"user","content":"hi"}],"tools":[],"seed":0.12345678901234567}'
            local r = p.post(raw)
            ngx.say(p.show(r))
            ngx.say("body unchanged: ", r.json.raw == raw, " in ", r.json.body_in)
            r = p.get("/v1/models")
            ngx.say("models: ", r.status, " ", (r.body:gsub("\n$", "")))
        }
    }
--- request
GET /t
--- response_body
200 tenant= route=any-model provider= root= sub=
body unchanged: true in memory
models: 200 {"object":"list","data":[]}




=== TEST 2: auth on: good, wrong, missing and malformed keys
--- user_files
>>> keys.txt
# key                    tenant  options
sk-acme-0123456789ab     acme
sk-globex-0123456789     globex  rate=100/s
--- config
    set $rlm_keys_file $TEST_NGINX_SERVER_ROOT/html/keys.txt;
    location = /t {
        content_by_lua_block {
            local p = require "ptest"
            local function line(label, r)
                ngx.say(label, ": ", p.show(r), " www-auth=",
                        tostring(r.headers["www-authenticate"]),
                        r.status == 401 and (" ct=" .. r.headers["content-type"]) or "")
            end
            line("acme", p.post(p.chat(), "sk-acme-0123456789ab"))
            line("globex", p.post(p.chat(), "sk-globex-0123456789"))
            line("wrong", p.post(p.chat(), "sk-acme-0123456789ac"))
            line("prefix", p.post(p.chat(), "sk-acme-0123456789a"))
            line("longer", p.post(p.chat(), "sk-acme-0123456789abc"))
            line("missing", p.post(p.chat()))
            line("basic", p.post(p.chat(), nil, { Authorization = "Basic c2stYWNtZTp4" }))
            line("empty bearer", p.post(p.chat(), nil, { Authorization = "Bearer " }))
            line("lowercase scheme", p.post(p.chat(), nil, { Authorization = "bearer sk-acme-0123456789ab" }))
            local r = p.post(p.chat(), "sk-nope-0123456789ab")
            local e = r.json.error
            local keys = {}
            for k in pairs(e) do keys[#keys + 1] = k end
            table.sort(keys)
            ngx.say("envelope: ", table.concat(keys, ","), " param is null: ", e.param == p.cjson.null,
                    " message: ", e.message)
            line("models no key", p.get("/v1/models"))
            line("models wrong key", p.get("/v1/models", "sk-wrong-0123456789"))
        }
    }
--- request
GET /t
--- response_body
acme: 200 tenant=acme route=gpt-small provider= root= sub= www-auth=nil
globex: 200 tenant=globex route=gpt-small provider= root= sub= www-auth=nil
wrong: 401 invalid_api_key authentication_error param=userdata: NULL www-auth=Bearer ct=application/json
prefix: 401 invalid_api_key authentication_error param=userdata: NULL www-auth=Bearer ct=application/json
longer: 401 invalid_api_key authentication_error param=userdata: NULL www-auth=Bearer ct=application/json
missing: 401 invalid_api_key invalid_request_error param=userdata: NULL www-auth=Bearer ct=application/json
basic: 401 invalid_api_key invalid_request_error param=userdata: NULL www-auth=Bearer ct=application/json
empty bearer: 401 invalid_api_key invalid_request_error param=userdata: NULL www-auth=Bearer ct=application/json
lowercase scheme: 200 tenant=acme route=gpt-small provider= root= sub= www-auth=nil
envelope: code,message,param,type param is null: true message: Incorrect API key provided.
models no key: 401 invalid_api_key invalid_request_error param=userdata: NULL www-auth=Bearer ct=application/json
models wrong key: 401 invalid_api_key authentication_error param=userdata: NULL www-auth=Bearer ct=application/json



=== TEST 3: the keys file is re-read when it changes; fail closed without one
--- user_files
>>> keys.txt
sk-first-key-000000001   alpha
--- config
    set $rlm_keys_file $TEST_NGINX_SERVER_ROOT/html/keys.txt;
    location = /t {
        content_by_lua_block {
            local p = require "ptest"
            local path = ngx.var.rlm_keys_file
            ngx.say("first: ", p.show(p.post(p.chat(), "sk-first-key-000000001")))
            ngx.say("second before: ", p.show(p.post(p.chat(), "sk-second-key-00000002")))
            local f = assert(io.open(path, "w"))
            f:write("sk-second-key-00000002 beta\n")
            f:close()
            ngx.sleep(1.2)
            ngx.say("first after: ", p.show(p.post(p.chat(), "sk-first-key-000000001")))
            ngx.say("second after: ", p.show(p.post(p.chat(), "sk-second-key-00000002")))
            -- a missing file keeps the last good keys
            os.remove(path)
            ngx.sleep(1.2)
            ngx.say("file removed: ", p.show(p.post(p.chat(), "sk-second-key-00000002")))
            -- a malformed line removes only that line's key
            f = assert(io.open(path, "w"))
            f:write("tiny9 beta\nsk-third-key-000000003 gamma rate=5/x\nsk-fourth-key-00000004 delta\n")
            f:close()
            ngx.sleep(1.2)
            ngx.say("after bad lines: ", p.show(p.post(p.chat(), "sk-second-key-00000002")))
            ngx.say("bad option: ", p.show(p.post(p.chat(), "sk-third-key-000000003")))
            ngx.say("good line: ", p.show(p.post(p.chat(), "sk-fourth-key-00000004")))
        }
    }
--- request
GET /t
--- response_body
first: 200 tenant=alpha route=gpt-small provider= root= sub=
second before: 401 invalid_api_key authentication_error param=userdata: NULL
first after: 401 invalid_api_key authentication_error param=userdata: NULL
second after: 200 tenant=beta route=gpt-small provider= root= sub=
file removed: 200 tenant=beta route=gpt-small provider= root= sub=
after bad lines: 401 invalid_api_key authentication_error param=userdata: NULL
bad option: 401 invalid_api_key authentication_error param=userdata: NULL
good line: 200 tenant=delta route=gpt-small provider= root= sub=
--- error_log eval
[qr/keys.txt: No such file or directory; keeping the previous version/,
 qr/keys file line 1 skipped: key shorter than 12/,
 qr/keys file line 2 skipped: rate must be/]
--- log_level: info
--- no_error_log
sk-
tiny9
[alert]



=== TEST 4: auth configured but the keys file never loaded: 503, not open
--- http_config
    init_by_lua_block {
        require("rlm.policy").configure{ keys_file = "/nonexistent/rlm-keys" }
    }
--- config
    location = /t {
        content_by_lua_block {
            local p = require "ptest"
            local r = p.post(p.chat(), "sk-first-key-000000001")
            ngx.say(p.show(r), " retry-after=", tostring(r.headers["retry-after"]))
            ngx.say("models: ", p.show(p.get("/v1/models", "sk-first-key-000000001")))
        }
    }
--- request
GET /t
--- response_body
503 auth_unavailable server_error param=userdata: NULL retry-after=5
models: 503 auth_unavailable server_error param=userdata: NULL
--- error_log
/nonexistent/rlm-keys: No such file or directory



=== TEST 5: rate limit per tenant: 429, Retry-After, envelope; other tenants unaffected
--- user_files
>>> keys.txt
sk-slow-tenant-0000001   slow    rate=3/m
sk-fast-tenant-0000001   fast
--- config
    set $rlm_keys_file $TEST_NGINX_SERVER_ROOT/html/keys.txt;
    location = /t {
        content_by_lua_block {
            local p = require "ptest"
            for i = 1, 4 do
                local r = p.post(p.chat(), "sk-slow-tenant-0000001")
                local ra = tonumber(r.headers["retry-after"])
                ngx.say(i, ": ", p.show(r), " retry-after in 1..60: ",
                        tostring(ra ~= nil and ra >= 1 and ra <= 60))
            end
            ngx.say("models too: ", p.show(p.get("/v1/models", "sk-slow-tenant-0000001")))
            ngx.say("other tenant: ", p.show(p.post(p.chat(), "sk-fast-tenant-0000001")))
            local r = p.post(p.chat(), "sk-slow-tenant-0000001")
            ngx.say("type: ", r.json.error.type, " message names the tenant: ",
                    tostring(r.json.error.message:find("'slow'", 1, true) ~= nil))
        }
    }
--- request
GET /t
--- response_body
1: 200 tenant=slow route=gpt-small provider= root= sub= retry-after in 1..60: false
2: 200 tenant=slow route=gpt-small provider= root= sub= retry-after in 1..60: false
3: 200 tenant=slow route=gpt-small provider= root= sub= retry-after in 1..60: false
4: 429 rate_limit_exceeded rate_limit_error param=userdata: NULL retry-after in 1..60: true
models too: 429 rate_limit_exceeded rate_limit_error param=userdata: NULL
other tenant: 200 tenant=fast route=gpt-small provider= root= sub=
type: rate_limit_error message names the tenant: true



=== TEST 6: concurrent completions per tenant; the slot is given back
--- user_files
>>> keys.txt
sk-one-at-a-time-00001   solo    concurrency=1
sk-two-at-a-time-00001   duo     concurrency=2
--- config
    set $rlm_keys_file $TEST_NGINX_SERVER_ROOT/html/keys.txt;
    location = /t {
        content_by_lua_block {
            local p = require "ptest"
            local function slow(key)
                return p.show(p.post(p.chat(), key, { ["X-Echo-Sleep"] = "1.5" }))
            end
            local a = ngx.thread.spawn(slow, "sk-one-at-a-time-00001")
            local d1 = ngx.thread.spawn(slow, "sk-two-at-a-time-00001")
            local d2 = ngx.thread.spawn(slow, "sk-two-at-a-time-00001")
            ngx.sleep(0.5)
            local r = p.post(p.chat(), "sk-one-at-a-time-00001")
            ngx.say("solo while busy: ", p.show(r), " retry-after=", tostring(r.headers["retry-after"]))
            ngx.say("duo third: ", p.show(p.post(p.chat(), "sk-two-at-a-time-00001")))
            -- a refused shaping error does not keep a slot either
            ngx.say("solo bad body while busy: ", p.show(p.post("[]", "sk-one-at-a-time-00001")))
            ngx.say("first solo: ", select(2, ngx.thread.wait(a)))
            ngx.say("duo 1: ", select(2, ngx.thread.wait(d1)))
            ngx.say("duo 2: ", select(2, ngx.thread.wait(d2)))
            ngx.sleep(0.2)
            ngx.say("solo after: ", p.show(p.post(p.chat(), "sk-one-at-a-time-00001")))
            ngx.say("solo again: ", p.show(p.post(p.chat(), "sk-one-at-a-time-00001")))
            -- the counter is back at zero (the key is gone) once the
            -- last request's log phase has run
            ngx.sleep(0.3)
            ngx.say("counters: ", tostring(ngx.shared.rlm_policy:get("running:solo")),
                    " ", tostring(ngx.shared.rlm_policy:get("running:duo")))
        }
    }
--- request
GET /t
--- response_body
solo while busy: 429 concurrency_limit_exceeded rate_limit_error param=userdata: NULL retry-after=1
duo third: 429 concurrency_limit_exceeded rate_limit_error param=userdata: NULL
solo bad body while busy: 400 invalid_json invalid_request_error param=userdata: NULL
first solo: 200 tenant=solo route=gpt-small provider= root= sub=
duo 1: 200 tenant=duo route=gpt-small provider= root= sub=
duo 2: 200 tenant=duo route=gpt-small provider= root= sub=
solo after: 200 tenant=solo route=gpt-small provider= root= sub=
solo again: 200 tenant=solo route=gpt-small provider= root= sub=
counters: nil nil



=== TEST 7: routing by name and alias, default route, tenant restrictions
--- user_files
>>> keys.txt
sk-all-models-00000001   open
sk-restricted-00000001   closed  models=small,tiny
sk-with-default-000001   wild    models=gpt-big,*
>>> routes.json
{"models": {
   "gpt-small": {"provider": "p1", "root_model": "small-v2", "sub_model": "tiny-v1",
                 "aliases": ["small", "fast"], "max_iterations": 10, "max_depth": 2,
                 "timeout": 60, "owned_by": "acme-ai", "created": 1700000000},
   "gpt-big": {"provider": "p2", "aliases": ["big"], "max_iterations": 30},
   "tiny": {"provider": "p1", "root_model": "tiny-v1"}},
 "default": {"provider": "p3", "max_iterations": 5}}
--- config
    set $rlm_keys_file $TEST_NGINX_SERVER_ROOT/html/keys.txt;
    set $rlm_routes_file $TEST_NGINX_SERVER_ROOT/html/routes.json;
    location = /t {
        content_by_lua_block {
            local p = require "ptest"
            local function try(key, model)
                local r = p.post(p.chat({ model = model }), key)
                ngx.say(key:match("^sk%-(%a+)"), " ", model, ": ", p.show(r))
            end
            try("sk-all-models-00000001", "gpt-small")
            try("sk-all-models-00000001", "fast")
            try("sk-all-models-00000001", "big")
            try("sk-all-models-00000001", "tiny")
            try("sk-all-models-00000001", "something-else")
            try("sk-restricted-00000001", "gpt-small")
            try("sk-restricted-00000001", "fast")
            try("sk-restricted-00000001", "tiny")
            try("sk-restricted-00000001", "gpt-big")
            try("sk-restricted-00000001", "something-else")
            try("sk-restricted-00000001", "big")
            local r = p.post(p.chat({ model = "small", rlm = { sub_model = "big" } }), "sk-restricted-00000001")
            ngx.say("restricted sub_model big: ", p.show(r))
            try("sk-with-default-000001", "big")
            try("sk-with-default-000001", "something-else")
            try("sk-with-default-000001", "small")
            r = p.post(p.chat({ model = "gpt-big" }), "sk-restricted-00000001")
            ngx.say(r.json.error.message)
        }
    }
--- request
GET /t
--- response_body
all gpt-small: 200 tenant=open route=gpt-small provider=p1 root=small-v2 sub=tiny-v1
all fast: 200 tenant=open route=gpt-small provider=p1 root=small-v2 sub=tiny-v1
all big: 200 tenant=open route=gpt-big provider=p2 root=gpt-big sub=
all tiny: 200 tenant=open route=tiny provider=p1 root=tiny-v1 sub=
all something-else: 200 tenant=open route=* provider=p3 root= sub=
restricted gpt-small: 200 tenant=closed route=gpt-small provider=p1 root=small-v2 sub=tiny-v1
restricted fast: 200 tenant=closed route=gpt-small provider=p1 root=small-v2 sub=tiny-v1
restricted tiny: 200 tenant=closed route=tiny provider=p1 root=tiny-v1 sub=
restricted gpt-big: 404 model_not_found invalid_request_error param=model
restricted something-else: 404 model_not_found invalid_request_error param=model
restricted big: 404 model_not_found invalid_request_error param=model
restricted sub_model big: 404 model_not_found invalid_request_error param=rlm.sub_model
with big: 200 tenant=wild route=gpt-big provider=p2 root=gpt-big sub=
with something-else: 200 tenant=wild route=* provider=p3 root= sub=
with small: 404 model_not_found invalid_request_error param=model
The model 'gpt-big' does not exist or you do not have access to it.



=== TEST 8: unknown model without a default route: 404 model_not_found; GET /v1/models per tenant
--- user_files
>>> keys.txt
sk-all-models-00000001   open
sk-restricted-00000001   closed  models=small,tiny
sk-other-00000000001     other   models=tiny
>>> routes.json
{"models": {
   "gpt-small": {"provider": "p1", "root_model": "small-v2", "aliases": ["small", "fast"],
                 "owned_by": "acme-ai", "created": 1700000000},
   "tiny": {"provider": "p1"}}}
--- config
    set $rlm_keys_file $TEST_NGINX_SERVER_ROOT/html/keys.txt;
    set $rlm_routes_file $TEST_NGINX_SERVER_ROOT/html/routes.json;
    location = /t {
        content_by_lua_block {
            local p = require "ptest"
            local r = p.post(p.chat({ model = "gpt-5" }), "sk-all-models-00000001")
            ngx.say(p.show(r))
            for _, key in ipairs({ "sk-all-models-00000001", "sk-restricted-00000001", "sk-other-00000000001" }) do
                r = p.get("/v1/models", key)
                local ids = {}
                for _, m in ipairs(r.json.data) do
                    ids[#ids + 1] = m.id .. "/" .. m.object .. "/" .. m.owned_by .. "/" .. m.created
                end
                ngx.say(r.status, " ", r.json.object, " ", table.concat(ids, " "))
            end
            r = p.rlmt.http("POST", "/v1/models", "{}", { Authorization = "Bearer sk-all-models-00000001" })
            ngx.say("POST: ", p.show(r), " allow=", tostring(r.headers["allow"]))
        }
    }
--- request
GET /t
--- response_body
404 model_not_found invalid_request_error param=model
200 list fast/model/acme-ai/1700000000 gpt-small/model/acme-ai/1700000000 small/model/acme-ai/1700000000 tiny/model/p1/0
200 list fast/model/acme-ai/1700000000 gpt-small/model/acme-ai/1700000000 small/model/acme-ai/1700000000 tiny/model/p1/0
200 list tiny/model/p1/0
POST: 405 method_not_allowed invalid_request_error param=userdata: NULL allow=GET



=== TEST 9: route limits: clamped to the route, filled from it; rlm.sub_model through routing
--- user_files
>>> routes.json
{"models": {
   "gpt-small": {"provider": "p1", "root_model": "small-v2", "sub_model": "tiny-v1",
                 "aliases": ["small"], "max_iterations": 10, "max_depth": 2, "timeout": 60},
   "tiny": {"provider": "p1", "root_model": "tiny-v1"},
   "nano": {"provider": "p1", "root_model": "nano-v3"},
   "gpt-big": {"provider": "p2", "max_iterations": 30},
   "free": {"provider": "p1"},
   "flat": {"provider": "p1", "max_depth": 0}}}
--- config
    set $rlm_routes_file $TEST_NGINX_SERVER_ROOT/html/routes.json;
    location = /t {
        content_by_lua_block {
            local p = require "ptest"
            local function try(label, extra)
                local r = p.post(p.chat(extra))
                if r.status == 200 then
                    ngx.say(label, ": ", p.shaped(r), " sub=", r.json.sub_model)
                else
                    ngx.say(label, ": ", p.show(r))
                end
            end
            try("nothing asked", {})
            try("asks for more", { rlm = { max_iterations = 50, max_depth = 9, timeout = 600 } })
            try("asks for less", { rlm = { max_iterations = 3, max_depth = 1, timeout = 2.5 } })
            try("asks some", { rlm = { max_depth = 1 } })
            try("depth 0", { rlm = { max_depth = 0 } })
            try("null values", { rlm = { max_depth = p.cjson.null } })
            try("sub model by name", { rlm = { sub_model = "nano" } })
            try("sub model other provider", { rlm = { sub_model = "gpt-big" } })
            try("sub model unknown", { rlm = { sub_model = "gpt-9" } })
            try("route without limits", { model = "free", rlm = { max_iterations = 500 } })
            try("route with one limit", { model = "gpt-big", rlm = { max_iterations = 31, timeout = 7 } })
            try("route with depth 0", { model = "flat", rlm = { max_depth = 3 } })
        }
    }
--- request
GET /t
--- response_body
nothing asked: rlm{max_iterations=10,max_depth=2,timeout=60,sub_model=tiny-v1} max_tokens=nil mct=nil sub=tiny-v1
asks for more: rlm{max_iterations=10,max_depth=2,timeout=60,sub_model=tiny-v1} max_tokens=nil mct=nil sub=tiny-v1
asks for less: rlm{max_iterations=3,max_depth=1,timeout=2.5,sub_model=tiny-v1} max_tokens=nil mct=nil sub=tiny-v1
asks some: rlm{max_iterations=10,max_depth=1,timeout=60,sub_model=tiny-v1} max_tokens=nil mct=nil sub=tiny-v1
depth 0: rlm{max_iterations=10,max_depth=0,timeout=60,sub_model=tiny-v1} max_tokens=nil mct=nil sub=tiny-v1
null values: rlm{max_iterations=10,max_depth=2,timeout=60,sub_model=tiny-v1} max_tokens=nil mct=nil sub=tiny-v1
sub model by name: rlm{max_iterations=10,max_depth=2,timeout=60,sub_model=nano-v3} max_tokens=nil mct=nil sub=nano-v3
sub model other provider: 400 invalid_value invalid_request_error param=rlm.sub_model
sub model unknown: 404 model_not_found invalid_request_error param=rlm.sub_model
route without limits: rlm{max_iterations=500} max_tokens=nil mct=nil sub=
route with one limit: rlm{max_iterations=30,timeout=7} max_tokens=nil mct=nil sub=
route with depth 0: rlm{max_depth=0} max_tokens=nil mct=nil sub=



=== TEST 10: every shaping error names its param
--- config
    location = /t {
        content_by_lua_block {
            local p = require "ptest"
            local null = p.cjson.null
            local function m(...) return { ... } end
            local U = { role = "user", content = "hi" }
            local cases = {
                { "empty body", "" },
                { "not json", "{\"model\":" },
                { "array", "[1,2]" },
                { "string", "\"x\"" },
                { "NaN", '{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":NaN}' },
                { "duplicate key", '{"model":"m","model":"n","messages":[{"role":"user","content":"x"}]}' },
                { "no model", { model = null } },
                { "model number", { model = 5 } },
                { "model empty", { model = "" } },
                { "no messages", { messages = null } },
                { "messages empty", { messages = {} } },
                { "messages object", { messages = { a = U } } },
                { "message not object", { messages = m(U, "hi") } },
                { "no role", { messages = m(U, { content = "x" }) } },
                { "bad role", { messages = m(U, U, { role = "robot", content = "x" }) } },
                { "no content", { messages = m({ role = "user" }) } },
                { "content number", { messages = m(U, { role = "system", content = 1 }) } },
                { "content empty array", { messages = m(U, { role = "system", content = {} }) } },
                { "part not object", { messages = m({ role = "user", content = { "x" } }) } },
                { "part image", { messages = m({ role = "user", content = { { type = "text", text = "a" }, { type = "image_url", image_url = {} } } }) } },
                { "part no text", { messages = m({ role = "user", content = { { type = "text" } } }) } },
                { "part text number", { messages = m({ role = "user", content = { { type = "text", text = 1 } } }) } },
                { "no user message", { messages = m({ role = "system", content = "x" }) } },
                { "stream string", { stream = "yes" } },
                { "max_tokens zero", { max_tokens = 0 } },
                { "max_tokens fraction", { max_tokens = 1.5 } },
                { "max_tokens string", { max_tokens = "10" } },
                { "mct negative", { max_completion_tokens = -3 } },
                { "both disagree", { max_tokens = 10, max_completion_tokens = 20 } },
                { "temperature high", { temperature = 2.5 } },
                { "temperature negative", { temperature = -0.1 } },
                { "temperature string", { temperature = "1" } },
                { "n two", { n = 2 } },
                { "stream_options without stream", { stream_options = { include_usage = true } } },
                { "stream_options not object", { stream = true, stream_options = "x" } },
                { "rlm not object", { rlm = "deep" } },
                { "rlm unknown key", { rlm = { depth = 3 } } },
                { "rlm iterations zero", { rlm = { max_iterations = 0 } } },
                { "rlm depth fraction", { rlm = { max_depth = 1.5 } } },
                { "rlm depth negative", { rlm = { max_depth = -1 } } },
                { "rlm timeout negative", { rlm = { timeout = -1 } } },
                { "rlm timeout string", { rlm = { timeout = "5" } } },
                { "rlm sub_model number", { rlm = { sub_model = 3 } } },
            }
            for _, c in ipairs(cases) do
                local body = c[2]
                if type(body) == "table" then
                    body = p.chat(body)
                end
                ngx.say(c[1], ": ", p.show(p.post(body)))
            end
        }
    }
--- request
GET /t
--- response_body
empty body: 400 invalid_json invalid_request_error param=userdata: NULL
not json: 400 invalid_json invalid_request_error param=userdata: NULL
array: 400 invalid_json invalid_request_error param=userdata: NULL
string: 400 invalid_json invalid_request_error param=userdata: NULL
NaN: 400 invalid_json invalid_request_error param=userdata: NULL
duplicate key: 400 invalid_json invalid_request_error param=model
no model: 400 missing_field invalid_request_error param=model
model number: 400 invalid_type invalid_request_error param=model
model empty: 400 invalid_type invalid_request_error param=model
no messages: 400 missing_field invalid_request_error param=messages
messages empty: 400 invalid_type invalid_request_error param=messages
messages object: 400 invalid_type invalid_request_error param=messages
message not object: 400 invalid_type invalid_request_error param=messages[1]
no role: 400 missing_field invalid_request_error param=messages[1].role
bad role: 400 invalid_value invalid_request_error param=messages[2].role
no content: 400 missing_field invalid_request_error param=messages[0].content
content number: 400 invalid_type invalid_request_error param=messages[1].content
content empty array: 400 invalid_type invalid_request_error param=messages[1].content
part not object: 400 invalid_type invalid_request_error param=messages[0].content[0]
part image: 400 invalid_value invalid_request_error param=messages[0].content[1].type
part no text: 400 missing_field invalid_request_error param=messages[0].content[0].text
part text number: 400 invalid_type invalid_request_error param=messages[0].content[0].text
no user message: 400 invalid_value invalid_request_error param=messages
stream string: 400 invalid_type invalid_request_error param=stream
max_tokens zero: 400 invalid_value invalid_request_error param=max_tokens
max_tokens fraction: 400 invalid_value invalid_request_error param=max_tokens
max_tokens string: 400 invalid_value invalid_request_error param=max_tokens
mct negative: 400 invalid_value invalid_request_error param=max_completion_tokens
both disagree: 400 invalid_value invalid_request_error param=max_completion_tokens
temperature high: 400 invalid_value invalid_request_error param=temperature
temperature negative: 400 invalid_value invalid_request_error param=temperature
temperature string: 400 invalid_value invalid_request_error param=temperature
n two: 400 invalid_value invalid_request_error param=n
stream_options without stream: 400 invalid_value invalid_request_error param=stream_options
stream_options not object: 400 invalid_type invalid_request_error param=stream_options
rlm not object: 400 invalid_type invalid_request_error param=rlm
rlm unknown key: 400 unknown_parameter invalid_request_error param=rlm.depth
rlm iterations zero: 400 invalid_value invalid_request_error param=rlm.max_iterations
rlm depth fraction: 400 invalid_value invalid_request_error param=rlm.max_depth
rlm depth negative: 400 invalid_value invalid_request_error param=rlm.max_depth
rlm timeout negative: 400 invalid_value invalid_request_error param=rlm.timeout
rlm timeout string: 400 invalid_value invalid_request_error param=rlm.timeout
rlm sub_model number: 400 invalid_value invalid_request_error param=rlm.sub_model



=== TEST 11: accepted shapes; normalisation; untouched members stay byte for byte
--- config
    location = /t {
        content_by_lua_block {
            local p = require "ptest"
            local function try(label, body)
                local r = p.post(body)
                if r.status ~= 200 then
                    ngx.say(label, ": ", p.show(r))
                    return r
                end
                ngx.say(label, ": ", p.shaped(r))
                return r
            end
            local raw = '{"model":"m","messages":[{"role":"developer","content":"be brief"},'
                .. '{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},'
                .. '{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},'
                .. '{"role":"tool","tool_call_id":"c1","content":"42"}],'
                .. '"stream":true,"stream_options":{"include_usage":true},"temperature":0,"n":1,'
                .. '"max_tokens":null,"tools":[],"seed":0.12345678901234567,"metadata":{}}'
            local r = try("all roles and part kinds", raw)
            ngx.say("  unchanged: ", r.json.raw == raw)
            r = try("max_completion_tokens", '{"model":"m",  "max_completion_tokens" : 77 ,"messages":[{"role":"user","content":"x \\"rlm\\": {}"}],"tools":[],"seed":0.12345678901234567,"z":"q\\\\","x":{"a":[1,{"b":"}"}]}}')
            ngx.say("  rewritten: ", r.json.raw, " length header ok: ", tonumber(r.json.content_length) == #r.json.raw)
            r = try("both the same", { model = "m", messages = { { role = "user", content = "x" } }, max_tokens = 5, max_completion_tokens = 5 })
            r = try("rlm kept as sent", '{"model":"m","messages":[{"role":"user","content":"x"}],"rlm":{"max_depth":2}}')
            ngx.say("  unchanged: ", r.json.raw == '{"model":"m","messages":[{"role":"user","content":"x"}],"rlm":{"max_depth":2}}')
            r = try("escaped key", '{"model":"m","messages":[{"role":"user","content":"x"}],"r\\u006cm":{"max_depth":2},"max_completion_tokens":3}')
            ngx.say("  rewritten: ", r.json.raw)
            try("POST without a body", nil)
            r = p.get("/v1/chat/completions")
            ngx.say("GET is left to the handler: ", p.show(r))
        }
    }
--- request
GET /t
--- response_body
all roles and part kinds: rlm{} max_tokens=userdata: NULL mct=nil
  unchanged: true
max_completion_tokens: rlm{} max_tokens=77 mct=nil
  rewritten: {"model":"m","messages":[{"role":"user","content":"x \"rlm\": {}"}],"tools":[],"seed":0.12345678901234567,"z":"q\\","x":{"a":[1,{"b":"}"}]},"max_tokens":77} length header ok: true
both the same: rlm{} max_tokens=5 mct=nil
rlm kept as sent: rlm{max_depth=2} max_tokens=nil mct=nil
  unchanged: true
escaped key: rlm{max_depth=2} max_tokens=3 mct=nil
  rewritten: {"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":3,"rlm":{"max_depth":2}}
POST without a body: 400 invalid_json invalid_request_error param=userdata: NULL
GET is left to the handler: 200 tenant= route= provider= root= sub=



=== TEST 12: bodies nginx buffered to a file are checked, rewritten as a file, or refused above body_max
--- http_config
    init_by_lua_block {
        require("rlm.policy").configure{ body_max = 200000 }
    }
--- config
    # no policy-server.conf: its 1m buffer would hide this one
    log_by_lua_block { require("rlm.policy").log() }
    client_body_buffer_size 1k;
    client_body_temp_path $TEST_NGINX_SERVER_ROOT/body_temp;
    location = /t {
        content_by_lua_block {
            local p = require "ptest"
            local text = string.rep("0123456789", 10000)     -- 100 kB
            local raw = '{"model":"m","messages":[{"role":"user","content":"' .. text .. '"}],"tools":[]}'
            local r = p.post(raw)
            ngx.say("unchanged: ", p.show(r), " in ", r.json.body_in, " same: ", r.json.raw == raw)
            raw = '{"model":"m","max_completion_tokens":9,"messages":[{"role":"user","content":"' .. text .. '"}],"tools":[]}'
            r = p.post(raw)
            local want = '{"model":"m","messages":[{"role":"user","content":"' .. text .. '"}],"tools":[],"max_tokens":9}'
            ngx.say("rewritten: ", p.show(r), " in ", r.json.body_in, " as expected: ", r.json.raw == want,
                    " content-length ok: ", tonumber(r.json.content_length) == #want)
            r = p.post('{"model":"m","messages":[{"role":"user","content":"' .. text .. '"},{"role":"robot","content":"x"}]}')
            ngx.say("checked: ", p.show(r))
            r = p.post('{"model":"m","messages":[{"role":"user","content":"' .. string.rep(text, 3) .. '"}]}')
            ngx.say("too big: ", p.show(r), " ", r.json.error.message)
            -- the rewritten copies are removed with their requests
            ngx.sleep(0.3)
            local dir = ngx.config.prefix() .. "body_temp"
            local left = io.popen("test -d " .. dir .. " && find " .. dir .. " -type f | wc -l"):read("*l")
            ngx.say("temporary files left: ", left)
        }
    }
--- request
GET /t
--- response_body
unchanged: 200 tenant= route=m provider= root= sub= in file same: true
rewritten: 200 tenant= route=m provider= root= sub= in file as expected: true content-length ok: true
checked: 400 invalid_value invalid_request_error param=messages[1].role
too big: 413 body_too_large invalid_request_error param=userdata: NULL the request body is larger than 200000 bytes
temporary files left: 0
--- error_log
a client request body is buffered to a temporary file



=== TEST 13: API keys never reach the error log (info level; debug logs all headers)
--- log_level: info
--- user_files
>>> keys.txt
sk-secret-aaaa-1111-bbbb   acme  rate=1/h
sk-secret-cccc             acme  bogus=1
sk-secret-dddd             bad/tenant
sk-secret-aaaa-1111-bbbb   dup
--- config
    set $rlm_keys_file $TEST_NGINX_SERVER_ROOT/html/keys.txt;
    location = /t {
        content_by_lua_block {
            local p = require "ptest"
            ngx.say(p.show(p.post(p.chat(), "sk-secret-aaaa-1111-bbbb")))
            ngx.say(p.show(p.post(p.chat(), "sk-secret-aaaa-1111-bbbb")))
            ngx.say(p.show(p.post(p.chat(), "sk-secret-eeee-wrong")))
            ngx.say(p.show(p.post(p.chat(), "sk-secret-cccc")))
            local r = p.post(p.chat(), nil, { Authorization = "Bearer sk-secret-ffff extra" })
            ngx.say(p.show(r), " body has no key: ", not r.body:find("secret", 1, true))
        }
    }
--- request
GET /t
--- response_body
200 tenant=acme route=gpt-small provider= root= sub=
429 rate_limit_exceeded rate_limit_error param=userdata: NULL
401 invalid_api_key authentication_error param=userdata: NULL
401 invalid_api_key authentication_error param=userdata: NULL
401 invalid_api_key invalid_request_error param=userdata: NULL body has no key: true
--- error_log eval
[qr/keys file line 2 skipped: unknown option bogus/,
 qr/keys file line 3 skipped: missing or malformed tenant name/,
 qr/keys file line 4 skipped: duplicate key/]
--- no_error_log
secret
[alert]



=== TEST 14: real sessions API: tenants see only their own sessions; max_sessions
--- http_config
    rlm_sandboxd $TEST_NGINX_RLM_SANDBOXD;
    rlm_runtime_dir $TEST_NGINX_SERVER_ROOT/rlm_temp;
    rlm_sessions_zone rlm_sessions 8m;
    rlm_pool_size 2;
    rlm_cell_timeout 10s;
    server {
        listen unix:$TEST_NGINX_SERVER_ROOT/logs/health.sock;
        location = /healthz { rlm_health; }
    }
--- init
main::wait_manager();
--- user_files
>>> keys.txt
sk-tenant-a-000000001   tenant-a  max_sessions=2
sk-tenant-b-000000001   tenant-b
--- config
    set $rlm_keys_file $TEST_NGINX_SERVER_ROOT/html/keys.txt;
    location /v1/sessions {
        access_by_lua_block { require("rlm.policy").access() }
        rlm_session_owner $rlm_tenant;
        rlm_sessions_api;
    }
    location /_rlm/ {
        internal;
        rlm_session_owner $rlm_tenant;
        rlm_sessions_api;
    }
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local A = { Authorization = "Bearer sk-tenant-a-000000001" }
            local B = { Authorization = "Bearer sk-tenant-b-000000001" }
            local function call(method, path, who, body)
                local h = {}
                for k, v in pairs(who or {}) do h[k] = v end
                return assert(t.http(method, path, body, h))
            end
            -- the manager starts with nginx: wait (bounded) until it answers
            local r
            for _ = 1, 100 do
                r = call("POST", "/v1/sessions", A, "{}")
                if r.status ~= 503 then break end
                ngx.sleep(0.1)
            end
            ngx.say("A creates: ", r.status, " owner=", tostring(r.json.owner))
            local s1 = r.json.id
            local path = "/v1/sessions/" .. s1
            ngx.say("B get: ", t.envelope(call("GET", path, B)))
            ngx.say("B eval: ", t.envelope(call("POST", path .. "/eval", B, '{"code":"print(1)"}')))
            ngx.say("B delete: ", t.envelope(call("DELETE", path, B)))
            ngx.say("B list: ", #call("GET", "/v1/sessions", B).json.data)
            ngx.say("no key get: ", t.envelope(call("GET", path)))
            ngx.say("no key create: ", t.envelope(call("POST", "/v1/sessions", nil, "{}")))
            ngx.say("A get: ", call("GET", path, A).status)
            r = call("POST", path .. "/eval", A, '{"code":"print(6 * 7)"}')
            ngx.say("A eval: ", r.status, " ", t.q(r.json.stdout))
            ngx.say("A list: ", #call("GET", "/v1/sessions", A).json.data)
            r = call("POST", "/v1/sessions", A, "{}")
            local s2 = r.json.id
            ngx.say("A second: ", r.status)
            r = call("POST", "/v1/sessions", A, "{}")
            ngx.say("A third: ", t.envelope(r), " retry-after=", tostring(r.headers["retry-after"]))
            r = call("POST", path .. "/eval", A, '{"code":"print(1)"}')
            ngx.say("A eval at the limit: ", r.status)
            ngx.say("B unaffected: ", call("POST", "/v1/sessions", B, "{}").status)
            ngx.say("A deletes one: ", call("DELETE", "/v1/sessions/" .. s2, A).status)
            r = call("POST", "/v1/sessions", A, "{}")
            ngx.say("A again: ", r.status)
            for _, who in ipairs({ A, B }) do
                for _, s in ipairs(call("GET", "/v1/sessions", who).json.data) do
                    call("DELETE", "/v1/sessions/" .. s.id, who)
                end
            end
            ngx.say("left: ", #call("GET", "/v1/sessions", A).json.data, " ",
                    #call("GET", "/v1/sessions", B).json.data)
        }
    }
--- request
GET /t
--- response_body
A creates: 201 owner=tenant-a
B get: 404 session_not_found invalid_request_error
B eval: 404 session_not_found invalid_request_error
B delete: 404 session_not_found invalid_request_error
B list: 0
no key get: 401 invalid_api_key invalid_request_error
no key create: 401 invalid_api_key invalid_request_error
A get: 200
A eval: 200 "42\n"
A list: 1
A second: 201
A third: 429 session_limit_exceeded rate_limit_error retry-after=1
A eval at the limit: 200
B unaffected: 201
A deletes one: 200
A again: 201
left: 0 0



=== TEST 15: replaceable parts: configure{} from init_by_lua, own routing module, access(kind) elsewhere
--- http_config
    init_by_lua_block {
        local my_routing = {
            resolve = function(conf, model, tenant, param)
                if model:sub(1, 6) ~= "house-" then
                    return nil, { status = 404, type = "invalid_request_error",
                                  code = "model_not_found", param = param or "model",
                                  message = "only house models here" }
                end
                return { name = model, provider = "house", root_model = model:sub(7),
                         sub_model = "", max_iterations = 2 }
            end,
            list = function(conf, tenant)
                return { { id = "house-" .. tenant.id, created = 1, owned_by = "me" } }
            end,
        }
        require("rlm.policy").configure{
            keys_file = ngx.config.prefix() .. "html/keys.txt",
            routing = my_routing,
        }
    }
--- user_files
>>> keys.txt
sk-house-tenant-00001   home
--- config
    location = /other/chat {
        access_by_lua_block { require("rlm.policy").access("completions") }
        content_by_lua_block { require("policy_echo").serve() }
    }
    location = /t {
        content_by_lua_block {
            local p = require "ptest"
            local key = "sk-house-tenant-00001"
            local r = p.post(p.chat({ model = "house-blend" }), key)
            ngx.say(p.show(r), " ", p.shaped(r))
            ngx.say(p.show(p.post(p.chat({ model = "gpt-small" }), key)))
            ngx.say(p.show(p.post(p.chat({ model = "house-x" }))))
            r = p.rlmt.http("POST", "/other/chat", p.cjson.encode(p.chat({ model = "house-y", rlm = { max_iterations = 9 } })),
                            { Authorization = "Bearer " .. key })
            ngx.say("other uri: ", p.show(r), " ", p.shaped(r))
            r = p.get("/v1/models", key)
            ngx.say("models: ", r.json.data[1].id, " ", #r.json.data)
        }
    }
--- request
GET /t
--- response_body
200 tenant=home route=house-blend provider=house root=blend sub= rlm{max_iterations=2} max_tokens=nil mct=nil
404 model_not_found invalid_request_error param=model
401 invalid_api_key invalid_request_error param=userdata: NULL
other uri: 200 tenant=home route=house-y provider=house root=y sub= rlm{max_iterations=2} max_tokens=nil mct=nil
models: house-home 1



=== TEST 16: a misspelt configure option stops nginx from starting
--- http_config
    init_by_lua_block {
        require("rlm.policy").configure{ key_file = "/etc/keys" }
    }
--- config
--- must_die
--- error_log
unknown option key_file



=== TEST 17: the top-level scanner agrees with cjson on random objects with tricky strings
--- config
    location = /t {
        content_by_lua_block {
            local cjson = require "cjson"
            local members = require("rlm.shaping")._members
            math.randomseed(12345)
            local alphabet = { "a", "\"", "\\", "{", "}", "[", "]", ",", ":", " ", "\n", "\\\"", "é" }
            local function str()
                local t = {}
                for i = 1, math.random(0, 8) do t[i] = alphabet[math.random(#alphabet)] end
                return table.concat(t)
            end
            local function value(depth)
                local k = math.random(depth > 3 and 4 or 6)
                if k == 1 then return str()
                elseif k == 2 then return math.random(-1000, 1000) / 7
                elseif k == 3 then return math.random(2) == 1
                elseif k == 4 then return cjson.null
                elseif k == 5 then
                    local a = {}
                    for i = 1, math.random(1, 4) do a[i] = value(depth + 1) end
                    return a
                else
                    local o = {}
                    for i = 1, math.random(1, 4) do o[str() .. i] = value(depth + 1) end
                    return o
                end
            end
            local function same(a, b)
                if type(a) ~= type(b) then return false end
                if type(a) ~= "table" then return a == b end
                for k, v in pairs(a) do if not same(v, b[k]) then return false end end
                for k in pairs(b) do if a[k] == nil then return false end end
                return true
            end
            local bad, total = 0, 0
            for _ = 1, 500 do
                local obj = {}
                for i = 1, math.random(1, 6) do obj[str() .. "k" .. i] = value(0) end
                local raw = cjson.encode(obj)
                -- some whitespace between tokens, as clients send it
                raw = raw:gsub('^{', '{ '):gsub('}$', ' }')
                local ref = cjson.decode(raw)
                local list = members(raw)
                total = total + 1
                local seen = 0
                for _, m in ipairs(list or {}) do
                    local one = cjson.decode("{" .. raw:sub(m.from, m.to) .. "}")
                    if not same(one[m.key], ref[m.key]) then bad = bad + 1 end
                    seen = seen + 1
                end
                local n = 0
                for _ in pairs(obj) do n = n + 1 end
                if list == nil or seen ~= n then bad = bad + 1 end
            end
            ngx.say(total, " objects, ", bad, " disagreements")
        }
    }
--- request
GET /t
--- response_body
500 objects, 0 disagreements



=== TEST 18: a routing table that does not check out is refused as a whole (503, logged)
--- user_files
>>> routes.json
{"models": {"a": {"provider": "p1", "max_depth": -1}}}
>>> routes2.json
{"models": {"a": {"aliases": ["b"]}, "b": {}}}
>>> routes3.json
{"models": {"a": {"provider": "p1", "max_iteratons": 3}}}
--- config
    set $rlm_routes_file $TEST_NGINX_SERVER_ROOT/html/routes.json;
    location = /t {
        content_by_lua_block {
            local p = require "ptest"
            local dir = ngx.config.prefix() .. "html/"
            local r = p.post(p.chat({ model = "a" }))
            ngx.say(p.show(r), " retry-after=", tostring(r.headers["retry-after"]))
            ngx.say("models: ", p.show(p.get("/v1/models")))
            for _, name in ipairs({ "routes2.json", "routes3.json" }) do
                os.rename(dir .. name, dir .. "routes.json")
                ngx.sleep(1.2)
                ngx.say(name, ": ", p.show(p.post(p.chat({ model = "a" }))))
            end
        }
    }
--- request
GET /t
--- response_body
503 routes_unavailable server_error param=userdata: NULL retry-after=5
models: 503 routes_unavailable server_error param=userdata: NULL
routes2.json: 503 routes_unavailable server_error param=userdata: NULL
routes3.json: 503 routes_unavailable server_error param=userdata: NULL
--- error_log eval
[qr/models\.a\.max_depth must be a whole number >= 0/,
 qr/b is a model and an alias|alias b names two models/,
 qr/models\.a: unknown field max_iteratons/]



=== TEST 19: a slot is given back even after an internal redirect (error_page wipes ngx.ctx)
--- user_files
>>> keys.txt
sk-one-at-a-time-00001   solo    concurrency=1
--- config
    set $rlm_keys_file $TEST_NGINX_SERVER_ROOT/html/keys.txt;
    location = /failing/chat {
        access_by_lua_block { require("rlm.policy").access("completions") }
        content_by_lua_block { ngx.exit(502) }
        error_page 502 = /fallback;
    }
    location = /fallback {
        internal;
        content_by_lua_block { ngx.say("fallback, ctx empty: ", next(ngx.ctx) == nil) }
    }
    location = /t {
        content_by_lua_block {
            local p = require "ptest"
            local body = p.cjson.encode(p.chat())
            local h = { Authorization = "Bearer sk-one-at-a-time-00001" }
            for i = 1, 3 do
                local r = p.rlmt.http("POST", "/failing/chat", body, h)
                ngx.sleep(0.2)
                ngx.say(i, ": ", r.status, " ", (r.body:gsub("\n$", "")),
                        " held after: ", tostring(ngx.shared.rlm_policy:get("running:solo")))
            end
            ngx.say("then: ", p.show(p.post(p.chat(), "sk-one-at-a-time-00001")))
        }
    }
--- request
GET /t
--- response_body
1: 502 fallback, ctx empty: true held after: nil
2: 502 fallback, ctx empty: true held after: nil
3: 502 fallback, ctx empty: true held after: nil
then: 200 tenant=solo route=gpt-small provider= root= sub=
