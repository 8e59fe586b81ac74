# The Lua policy feeds the host's checks on what code asks for: the
# completion location of conf/rlm.conf, as shipped, behind API keys and a
# routing table.  lua/rlm/policy.lua sets $rlm_code_models (the upstream
# model names of the tenant's routes on the request's provider, see
# rlm.routing.code_models) for rlm_completion_code_models, and
# $rlm_tenant_max_sessions (the key's max_sessions) for
# rlm_session_owner_max.

use FindBin;
use lib "$FindBin::Bin/api_lib";
use lib "$FindBin::Bin/loop_lib";
use lib "$FindBin::Bin/boundary_lib";
use RlmTest 'no_plan';
use Boundary;

our $Root = $RlmTest::Root;

# the completion location exactly as conf/rlm.conf ships it
open my $fh, '<', "$Root/conf/rlm.conf" or die "conf/rlm.conf: $!";
my $shipped = do { local $/; <$fh> };
close $fh;

# (up to the brace at the location's own indentation: blocks inside it
# close with braces of their own)
my ($Completions) = $shipped =~ m{^(([ \t]*)location = /v1/chat/completions \{.*?^\2\})}ms
    or die "no completion location in conf/rlm.conf";

# a unique name per run: test files run in parallel
my $Files = "$Root/t/servroot_boundary_policy_$$";

open my $k, '>', "${Files}_keys" or die $!;
print $k "sk-tenant-a-0001 alpha max_sessions=4 models=smart,cheap,other\n"
       . "sk-tenant-b-0002 beta\n";
close $k;

open my $r, '>', "${Files}_routes.json" or die $!;
print $r <<'JSON';
{"models": {
  "smart": {"provider": "mock", "root_model": "script:root",
            "sub_model": "script:sub", "aliases": ["s"],
            "max_iterations": 2},
  "cheap": {"provider": "mock", "root_model": "cheap-upstream"},
  "premium": {"provider": "mock", "root_model": "premium-upstream"},
  "other": {"provider": "other", "root_model": "other-upstream"}
}}
JSON
close $r;

add_block_preprocessor(sub {
    my $block = shift;
    my $http = $block->http_config // '';
    $block->set_value('http_config', <<"_EOC_" . $http);
    include $Root/conf/policy.conf;
    init_by_lua_block {
        require("rlm.policy").configure{
            keys_file = "${Files}_keys",
            routes_file = "${Files}_routes.json",
        }
    }
    rlm_provider mock url=http://127.0.0.1:\$TEST_NGINX_SERVER_PORT/gate/v1
                 model=script:root retries=0 timeout=60s;
    rlm_provider other url=http://127.0.0.1:\$TEST_NGINX_SERVER_PORT/gate/v1
                 model=other-upstream retries=0 timeout=60s;
_EOC_
    my $config = $block->config // '';
    $block->set_value('config', <<"_EOC_" . $config);
    # no completions location
    # no api locations
    include $Root/conf/policy-server.conf;
$Completions
    location /v1/sessions {
        access_by_lua_block { require("rlm.policy").access() }
        rlm_session_owner \$rlm_tenant;
        rlm_sessions_api;
    }
    location /_rlm/ {
        internal;
        rlm_session_owner \$rlm_tenant;
        rlm_sessions_api;
    }
_EOC_
});

no_shuffle();
run_tests();

unlink "${Files}_keys", "${Files}_routes.json";

__DATA__

=== TEST 1: the shipped completion location hands the policy's variables to the checks
--- config
    location = /t {
        content_by_lua_block {
            local f = io.open("$TEST_NGINX_RLM_ROOT/conf/rlm.conf")
            local conf = f:read("*a")
            f:close()
            local loc = conf:match("location = /v1/chat/completions {(.-)rlm_completions;")
            ngx.say(loc:find("rlm_completion_code_models%s+%$rlm_code_models;") ~= nil)
            ngx.say(loc:find("rlm_session_owner_max%s+%$rlm_tenant_max_sessions;") ~= nil)
        }
    }
--- request
GET /t
--- response_body
true
true



=== TEST 2: code may name the upstream models of the tenant's routes on the same provider, and nothing else
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local b = require "boundary"
            local code = l.repl(
                "out = []",
                "for m in ('script:sub', 'script:root', 'cheap-upstream', 'cheap',"
                .. " 'smart', 's', 'premium-upstream', 'other-upstream', 'made-up'):",
                "    try:",
                "        llm_query('hi', model=m)",
                "        out.append(m + ' ok')",
                "    except RuntimeError as e:",
                "        out.append(m + ' refused')",
                "try:",
                "    rlm_query_batched(['x'], model='premium-upstream')",
                "    out.append('rlm premium ok')",
                "except RuntimeError as e:",
                "    out.append('rlm premium refused')",
                "answer.update(content=', '.join(out), ready=True)")
            local function saw()
                local seen, out = {}, {}
                for _, m in ipairs(b.models_seen()) do
                    seen[m] = true
                end
                for _, m in ipairs({ "premium-upstream", "other-upstream",
                                     "made-up", "cheap", "smart", "s" }) do
                    if seen[m] then
                        out[#out + 1] = m
                    end
                end
                return #out > 0 and table.concat(out, " ") or "none of them"
            end
            for _, key in ipairs({ "sk-tenant-a-0001", "sk-tenant-b-0002" }) do
                l.script("root", { { content = code } })
                local res = l.complete({ model = "s", context = "x",
                    messages = { { role = "user", content = "go" } } },
                    { Authorization = "Bearer " .. key })
                ngx.say(key:sub(11, 11), ": ", res.status, " ", l.answer(res))
                ngx.say("upstream so far: ", saw())
            end
        }
    }
--- request
GET /t
--- response_body
a: 200 script:sub ok, script:root ok, cheap-upstream ok, cheap refused, smart refused, s refused, premium-upstream refused, other-upstream refused, made-up refused, rlm premium refused
upstream so far: none of them
b: 200 script:sub ok, script:root ok, cheap-upstream ok, cheap refused, smart refused, s refused, premium-upstream ok, other-upstream refused, made-up refused, rlm premium ok
upstream so far: premium-upstream



=== TEST 3: the key's max_sessions is the quota the children of the tenant's completions count against
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local b = require "boundary"
            local rlmt = require "rlmt"
            -- (rlmt.http adds to the headers table it is given)
            local function alpha()
                return { Authorization = "Bearer sk-tenant-a-0001" }
            end
            local function beta()
                return { Authorization = "Bearer sk-tenant-b-0002" }
            end
            local function owned(h)
                return #rlmt.http("GET", "/v1/sessions", nil, h()).json.data
            end
            -- alpha (max_sessions=4) has a session; its completion makes 2
            ngx.say("alpha creates: ",
                    rlmt.http("POST", "/v1/sessions", "", alpha()).status)
            local code = l.repl(
                "out = []",
                "for n in (10, 3, 2):",
                "    try:",
                "        out.append('%d ok %d' % (n, len(rlm_query_batched(['c'] * n))))",
                "    except RuntimeError as e:",
                "        out.append('%d: %s' % (n, str(e).split(';')[0]))",
                "answer.update(content=' | '.join(out), ready=True)")
            l.script("root", { { content = code } })
            l.script("sub", { { content = "FINAL(c)" } })
            b.gate_close("script:sub")
            local co = ngx.thread.spawn(l.complete, { model = "smart", context = "x",
                messages = { { role = "user", content = "go" } } }, alpha())
            ngx.say("children held: ", b.gate_wait(2, 60))
            ngx.say("alpha's sessions at the peak: ", owned(alpha))
            b.gate_open()
            local ok, res = ngx.thread.wait(co)
            ngx.say("alpha: ", res.status, " ", l.answer(res))
            ngx.say("alpha's sessions after: ", owned(alpha))
            -- beta has no quota
            l.script("root", { { content = code } })
            res = l.complete({ model = "smart", context = "x",
                messages = { { role = "user", content = "go" } } }, beta())
            ngx.say("beta: ", res.status, " ", l.answer(res))
        }
    }
--- request
GET /t
--- response_body
alpha creates: 201
children held: 2
alpha's sessions at the peak: 4
alpha: 200 10: the tenant's session quota (max_sessions) leaves no room for these child RLMs | 3: the tenant's session quota (max_sessions) leaves no room for these child RLMs | 2 ok 2
alpha's sessions after: 2
beta: 200 10 ok 10 | 3 ok 3 | 2 ok 2



=== TEST 4: a completion that opens a new session counts against the key's max_sessions
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local rlmt = require "rlmt"
            local function alpha(extra)
                local h = { Authorization = "Bearer sk-tenant-a-0001" }
                for k, v in pairs(extra or {}) do h[k] = v end
                return h
            end
            local function beta()
                return { Authorization = "Bearer sk-tenant-b-0002" }
            end
            local done = l.repl("answer.update(content='done', ready=True)")
            local function complete(h)
                l.script("root", { { content = done } })
                return l.complete({ model = "smart", context = "x",
                    messages = { { role = "user", content = "go" } } }, h)
            end
            local function code(res)
                return res.status .. " " .. (l.answer(res)
                       or (res.json and res.json.error
                           and res.json.error.code) or "?")
            end

            -- alpha (max_sessions=4) makes 4 sessions
            local ids = {}
            for i = 1, 4 do
                local r = rlmt.http("POST", "/v1/sessions", "", alpha())
                ids[i] = r.json and r.json.id
            end
            ngx.say("alpha has: ",
                    #rlmt.http("GET", "/v1/sessions", nil, alpha()).json.data)

            -- a fifth session, through a completion: refused; a session
            -- it does not have is not made (404), so not counted
            ngx.say("new session: ", code(complete(alpha())))
            ngx.say("unknown id: ", code(complete(alpha(
                { ["X-RLM-Session-Id"] = string.rep("ab", 16) }))))
            -- one of its own sessions: no new one, so it goes
            ngx.say("its own session: ", code(complete(alpha(
                { ["X-RLM-Session-Id"] = ids[2] }))))
            ngx.say("alpha still has: ",
                    #rlmt.http("GET", "/v1/sessions", nil, alpha()).json.data)

            -- room again after a delete
            rlmt.http("DELETE", "/v1/sessions/" .. ids[1], nil, alpha())
            ngx.say("after a delete: ", code(complete(alpha())))

            -- beta has no quota
            ngx.say("beta: ", code(complete(beta())))
        }
    }
--- request
GET /t
--- response_body
alpha has: 4
new session: 429 session_limit_exceeded
unknown id: 404 session_not_found
its own session: 200 done
alpha still has: 4
after a delete: 200 done
beta: 200 done
