# The Lua policy's side of cost and of the request's own settings, on the
# completion location of conf/rlm.conf as shipped: the routing table's
# prices reach the loop ($rlm_prices -> rlm_completion_prices), a route's
# max_cost caps rlm.max_cost, a tenant's max_cost (keys file) is a budget
# on this node that the log phase spends from, and a route says whether
# it takes rlm.system_prompt.

use FindBin;
use lib "$FindBin::Bin/api_lib";
use lib "$FindBin::Bin/loop_lib";
use RlmTest 'no_plan';
use RlmLoop;

our $Root = $RlmTest::Root;

open my $fh, '<', "$Root/conf/rlm.conf" or die "conf/rlm.conf: $!";
my $shipped = do { local $/; <$fh> };
close $fh;

my ($Completions) = $shipped =~ m{^(([ \t]*)location = /v1/chat/completions \{.*?^\2\})}ms
    or die "no completion location in conf/rlm.conf";

# a unique name per run: test files run in parallel
my $Files = "$Root/t/servroot_policy_cost_$$";

open my $k, '>', "${Files}_keys" or die $!;
print $k "sk-tenant-a-0001 alpha max_cost=0.3\n"
       . "sk-tenant-b-0002 beta\n";
close $k;

open my $r, '>', "${Files}_routes.json" or die $!;
print $r <<'JSON';
{"models": {
  "priced": {"provider": "mock", "root_model": "script:root",
             "max_cost": 0.5, "system_prompt": true},
  "plain": {"provider": "mock", "root_model": "script:root"},
  "compact": {"provider": "mock", "root_model": "script:root",
              "sub_model": "script:sub", "compaction_threshold": 100}
 },
 "prices": {"script:root": {"prompt": 1000, "completion": 2000},
            "script:sub": {"prompt": 0.00001, "completion": 0}}
}
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
_EOC_
    my $config = $block->config // '';
    $block->set_value('config', <<"_EOC_" . $config);
    # no completions location
    include $Root/conf/policy-server.conf;
$Completions
_EOC_
});

no_shuffle();
run_tests();

unlink "${Files}_keys", "${Files}_routes.json";

__DATA__

=== TEST 1: the routing table's prices reach the loop: usage.cost
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local u = { prompt_tokens = 100, completion_tokens = 10,
                        total_tokens = 110 }
            l.script("root", {
                { content = l.repl("answer.update(content='hi', ready=True)"),
                  usage = u },
            })
            local res = l.complete({ model = "plain", context = "x",
                messages = { { role = "user", content = "go" } } },
                { Authorization = "Bearer sk-tenant-b-0002" })
            local j = res.json
            ngx.say(res.status, " ", l.answer(res), " cost ",
                    string.format("%.2f %.2f", j.usage.cost, j.rlm.cost))
        }
    }
--- request
GET /t
--- response_body
200 hi cost 0.12 0.12



=== TEST 2: a route's max_cost caps what the request asks for
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local u = { prompt_tokens = 100, completion_tokens = 10,
                        total_tokens = 110 }
            l.script("root", { { content = "more\n" .. l.repl("x = 1"),
                                 usage = u } })
            local res = l.complete({ model = "priced", context = "x",
                rlm = { max_cost = 5 },
                messages = { { role = "user", content = "go" } } },
                { Authorization = "Bearer sk-tenant-b-0002" })
            local j = res.json
            -- 0.12 a call: the fifth passes 0.5
            ngx.say(res.status, " ", j.rlm.limit, " ", j.rlm.iterations,
                    " ", l.answer(res))
        }
    }
--- request
GET /t
--- response_body
200 max_cost 5 more



=== TEST 3: a tenant's max_cost: its completions spend it, then 429 insufficient_quota
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local u = { prompt_tokens = 100, completion_tokens = 10,
                        total_tokens = 110 }
            l.script("root", { { content = "more\n" .. l.repl("x = 1"),
                                 usage = u } })
            local function ask(key)
                return l.complete({ model = "plain", context = "x",
                    messages = { { role = "user", content = "go" } } },
                    { Authorization = "Bearer " .. key })
            end
            local res = ask("sk-tenant-a-0001")
            local j = res.json
            ngx.say(res.status, " ", j.rlm.limit, " ", j.rlm.iterations,
                    " ", string.format("%.2f", j.usage.cost))
            res = ask("sk-tenant-a-0001")
            ngx.say(res.status, " ", res.json.error.type, " ",
                    res.json.error.code)
            -- another tenant is not touched
            l.script("root", {
                { content = l.repl("answer.update(content='b', ready=True)") },
            })
            res = ask("sk-tenant-b-0002")
            ngx.say(res.status, " ", l.answer(res))
        }
    }
--- request
GET /t
--- response_body
200 max_cost 3 0.36
429 insufficient_quota insufficient_quota
200 b



=== TEST 4: rlm.system_prompt only where the route takes it; sub_sampling passes
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            l.script("root", {
                { content = l.repl("a = llm_query('p')",
                                   "answer.update(content=a, ready=True)") },
                { content = "from sub" },
            })
            local function ask(model, rlm)
                return l.complete({ model = model, context = "x", rlm = rlm,
                    messages = { { role = "user", content = "go" } } },
                    { Authorization = "Bearer sk-tenant-b-0002" })
            end
            local own = { system_prompt = "Answer in French.",
                          sub_sampling = { temperature = 0.5 } }
            local res = ask("plain", own)
            ngx.say(res.status, " ", res.json.error.param)
            res = ask("priced", own)
            local sent = l.requests("script:root")[1].req.messages[1]
            local sub = l.requests("script:root")[2].req
            ngx.say(res.status, " ", l.answer(res), " ", sent.content, " ",
                    sub.temperature)
            res = ask("priced", { max_cost = "lots" })
            ngx.say(res.status, " ", res.json.error.param)
            res = ask("priced", { sub_sampling = "warm" })
            ngx.say(res.status, " ", res.json.error.param)
        }
    }
--- request
GET /t
--- response_body
400 rlm.system_prompt
200 from sub Answer in French. 0.5
400 rlm.max_cost
400 rlm.sub_sampling



=== TEST 5: a route's compaction_threshold applies to its completions
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local big = { prompt_tokens = 150, completion_tokens = 10,
                          total_tokens = 160 }
            l.script("root", {
                { content = "a\n" .. l.repl("x = 1"), usage = big },
                { content = "b\n" .. l.repl("x = 2"), usage = big },
                { content = l.repl("answer.update(content='ok', ready=True)"),
                  usage = big },
            })
            l.script("sub", { { content = "x was set twice" } })
            local function ask(model)
                return l.complete({ model = model, context = "x",
                    messages = { { role = "user", content = "go" } } },
                    { Authorization = "Bearer sk-tenant-b-0002" })
            end
            local res = ask("compact")
            ngx.say(res.status, " ", l.answer(res), " ",
                    tostring(res.json.rlm.compactions))
            res = ask("plain")
            ngx.say(res.status, " ", l.answer(res), " ",
                    tostring(res.json.rlm.compactions))
        }
    }
--- request
GET /t
--- response_body
200 ok 1
200 ok nil
