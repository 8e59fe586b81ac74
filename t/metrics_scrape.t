# The gateway metrics of /metrics as a Prometheus server sees them: HELP
# and TYPE on every family, `promtool check metrics` clean, per-model
# counters of completions, model calls, tokens, iterations and sub-calls,
# sandbox acquires by tier, ngx_rlm_build_info; a client naming random
# models cannot grow the table past its bound; a real Prometheus scrapes
# the test nginx and its HTTP API answers with the values /metrics gave;
# deploy/'s alert rules pass `promtool check rules`, load into that
# Prometheus and evaluate, and the Grafana dashboard only names families
# the module exports.
#
# Needs Debian's prometheus package (prometheus, promtool).  Without it
# the file is skipped, except when RLM_REQUIRE_PROMETHEUS or CI is set (as
# .ci/run does): then it fails.

use FindBin;
use lib "$FindBin::Bin/api_lib";
use lib "$FindBin::Bin/loop_lib";
use RlmTest;
use RlmLoop;

use File::Spec ();
use File::Temp ();
use IO::Socket::INET ();

{
    my $required = grep { defined $_ && $_ ne '' && $_ ne '0'
                          && lc $_ ne 'false' }
                   @ENV{qw( RLM_REQUIRE_PROMETHEUS CI )};
    my %bin;

    for my $name (qw( prometheus promtool )) {
        ($bin{$name}) = grep { -x $_ }
                        map { File::Spec->catfile($_, $name) }
                        File::Spec->path, '/usr/bin';
    }

    my @missing = grep { !defined $bin{$_} } qw( prometheus promtool );

    if (@missing) {
        my $why = "@missing not installed (apt-get install prometheus)";

        if ($required) {
            plan tests => 1;
            fail("metrics scrape test cannot run: $why;"
                 . ' RLM_REQUIRE_PROMETHEUS or CI is set, so this is a'
                 . ' failure');
            exit 1;
        }

        plan skip_all => $why;
    }

    $ENV{TEST_NGINX_PROMETHEUS} = $bin{prometheus};
    $ENV{TEST_NGINX_PROMTOOL} = $bin{promtool};
}

# Prometheus' own directory and port, outside the server root (the real
# Test::Nginx empties that between blocks)
our $PromDir = File::Temp::tempdir('rlm-prom-XXXXXX', TMPDIR => 1,
                                   CLEANUP => 1);
$ENV{TEST_NGINX_PROM_DIR} = $PromDir;

{
    my $s = IO::Socket::INET->new(Listen => 1, LocalAddr => '127.0.0.1',
                                  LocalPort => 0, Proto => 'tcp', ReuseAddr => 1)
        or die "no free port: $!";
    $ENV{TEST_NGINX_PROM_PORT} = $s->sockport;
    close $s;
}

# One Prometheus for the file, started here (not by nginx, whose worker
# would hand it its listening sockets): it finds the test nginx through a
# file_sd target list that TEST 4 writes, and loads deploy/'s alert rules.
our $PromPid;

{
    my $rules = "$RlmTest::Root/deploy/prometheus/ngx-rlm-alerts.yml";

    open my $fh, '>', "$PromDir/prometheus.yml" or die "$PromDir: $!";
    print $fh <<"YML";
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $rules
scrape_configs:
  - job_name: ngx_rlm
    file_sd_configs:
      - files: ['$PromDir/targets.json']
        refresh_interval: 1s
YML
    close $fh;

    $PromPid = fork();
    die "fork: $!" unless defined $PromPid;

    if ($PromPid == 0) {
        open STDOUT, '>', "$PromDir/prometheus.log";
        open STDERR, '>&', \*STDOUT;
        exec $ENV{TEST_NGINX_PROMETHEUS},
             "--config.file=$PromDir/prometheus.yml",
             "--storage.tsdb.path=$PromDir/data",
             "--web.listen-address=127.0.0.1:$ENV{TEST_NGINX_PROM_PORT}",
             '--log.level=warn';
        exit 127;
    }
}

END {
    if ($PromPid) {
        kill 'TERM', $PromPid;
        waitpid $PromPid, 0;
    }
}

plan 'no_plan';
no_shuffle();
run_tests();

__DATA__

=== TEST 1: every family has HELP and TYPE; promtool check metrics is clean; build info
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local x = require "rlm_test_exec"
            local m, res = t.metrics()
            local help, typ = {}, {}
            for fam in res.body:gmatch("# HELP (%S+) ") do
                help[fam] = true
            end
            for fam in res.body:gmatch("# TYPE (%S+) %a+") do
                typ[fam] = true
            end
            local bad = 0
            for name in pairs(m) do
                local fam = name:match("^[%w_]+")
                for _, suf in ipairs({ "_bucket", "_sum", "_count" }) do
                    if not typ[fam] and fam:sub(-#suf) == suf then
                        fam = fam:sub(1, -#suf - 1)
                    end
                end
                if not help[fam] or not typ[fam] then
                    bad = bad + 1
                    ngx.say("no HELP or TYPE: ", name)
                end
            end
            ngx.say("samples without HELP and TYPE: ", bad)
            local n = 0
            for _ in pairs(help) do n = n + 1 end
            ngx.say("families over 25: ", n > 25)
            local f = assert(io.open(
                "$TEST_NGINX_PROM_DIR/metrics.txt", "w"))
            f:write(res.body)
            f:close()
            local out = x.run("$TEST_NGINX_PROMTOOL check metrics < "
                              .. "$TEST_NGINX_PROM_DIR/metrics.txt")
            ngx.say("promtool: [", out, "]")
            local b = res.body:match("ngx_rlm_build_info(%b{}) 1\n")
            ngx.say("version: ", b:match('version="([^"]+)"'))
            local nv = ngx.config.nginx_version
            ngx.say("nginx: ", b:match('nginx_version="([^"]+)"')
                               == string.format("%d.%d.%d",
                                      math.floor(nv / 1000000),
                                      math.floor(nv / 1000) % 1000, nv % 1000)
                               and "ok" or b)
            ngx.say("python: ", b:match('python_version="([^"]+)"'))
            ngx.say("libcurl: ", b:match('libcurl_version="(%d+%.%d+)') ~= nil)
            ngx.say("acquire rows: ",
                    m['rlm_sandbox_acquires_total{tier="native",result="ok"}']
                    ~= nil)
        }
    }
--- request
GET /t
--- response_body_like chomp
^samples without HELP and TYPE: 0
families over 25: true
promtool: \[\]
version: \d+\.\d+\.\d+
nginx: ok
python: 3\.\d+
libcurl: true
acquire rows: true
$



=== TEST 2: per-model counters move with completions, model calls (passthrough too), sub-calls and acquires
--- config
    location = /pt { rlm_chat_passthrough mock; }
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local l = require "loopt"
            local u = function(p, c)
                return { prompt_tokens = p, completion_tokens = c,
                         total_tokens = p + c }
            end
            local before = t.metrics()
            l.script("root", {
                { content = l.repl("r = llm_query('6*7?')",
                                   "rs = llm_query_batched(['a', 'b'])"),
                  usage = u(100, 10) },
                { content = l.repl("answer.update(content=r, ready=True)"),
                  usage = u(200, 20) },
            })
            l.script("sub", { { content = "42", usage = u(7, 3) } })
            local res = l.complete(l.ask("go", { context = "x",
                                   rlm = { sub_model = "script:sub" } }))
            ngx.say("ok completion: ", res.status)
            -- a provider error ends the next one
            l.script("bad", { { status = 500, error = "boom" } })
            res = l.complete(l.ask("go", { model = "script:bad" }))
            ngx.say("failed completion: ", res.status)
            -- a call through rlm_chat_passthrough counts as a model call
            l.script("pt", { { content = "hi", usage = u(5, 1) } })
            res = t.http("POST", "/pt", '{"model": "script:pt", '
                         .. '"messages": [{"role": "user", "content": "x"}]}',
                         { ["Content-Type"] = "application/json" })
            ngx.say("passthrough: ", res.status)
            local m = t.metrics()
            local function d(name)
                return (m[name] or 0) - (before[name] or 0)
            end
            for _, name in ipairs({
                'rlm_completions_total{model="script:root",outcome="stop"}',
                'rlm_completions_total{model="script:root",outcome="error"}',
                'rlm_completions_total{model="script:bad",outcome="error"}',
                'rlm_completion_iterations_total{model="script:root"}',
                'rlm_completion_duration_seconds_count{model="script:root"}',
                'rlm_model_calls_total{model="script:root",code="ok",status="2xx"}',
                'rlm_model_calls_total{model="script:sub",code="ok",status="2xx"}',
                'rlm_model_calls_total{model="script:bad",code="provider_error",status="5xx"}',
                'rlm_model_calls_total{model="script:pt",code="ok",status="2xx"}',
                'rlm_model_tokens_total{model="script:pt",type="prompt"}',
                'rlm_model_call_duration_seconds_count{model="script:sub"}',
                'rlm_model_tokens_total{model="script:root",type="prompt"}',
                'rlm_model_tokens_total{model="script:root",type="completion"}',
                'rlm_model_tokens_total{model="script:sub",type="prompt"}',
                'rlm_subcalls_total{model="script:sub",fn="llm_query"}',
                'rlm_subcalls_total{model="script:sub",fn="rlm_query"}',
            }) do
                ngx.say(name, " +", d(name))
            end
            local acq = d('rlm_sandbox_acquires_total{tier="native",result="ok"}')
            ngx.say("acquires ok grew: ", acq >= 1)
            ngx.say("+Inf = count: ",
                m['rlm_model_call_duration_seconds_bucket{model="script:sub",le="+Inf"}']
                == m['rlm_model_call_duration_seconds_count{model="script:sub"}'])
        }
    }
--- request
GET /t
--- error_log
root model call failed
--- no_error_log
[alert]
[emerg]
--- response_body
ok completion: 200
failed completion: 502
passthrough: 200
rlm_completions_total{model="script:root",outcome="stop"} +1
rlm_completions_total{model="script:root",outcome="error"} +0
rlm_completions_total{model="script:bad",outcome="error"} +1
rlm_completion_iterations_total{model="script:root"} +2
rlm_completion_duration_seconds_count{model="script:root"} +1
rlm_model_calls_total{model="script:root",code="ok",status="2xx"} +2
rlm_model_calls_total{model="script:sub",code="ok",status="2xx"} +3
rlm_model_calls_total{model="script:bad",code="provider_error",status="5xx"} +1
rlm_model_calls_total{model="script:pt",code="ok",status="2xx"} +1
rlm_model_tokens_total{model="script:pt",type="prompt"} +5
rlm_model_call_duration_seconds_count{model="script:sub"} +3
rlm_model_tokens_total{model="script:root",type="prompt"} +300
rlm_model_tokens_total{model="script:root",type="completion"} +30
rlm_model_tokens_total{model="script:sub",type="prompt"} +21
rlm_subcalls_total{model="script:sub",fn="llm_query"} +3
rlm_subcalls_total{model="script:sub",fn="rlm_query"} +0
acquires ok grew: true
+Inf = count: true



=== TEST 3: random model names cannot grow the table: 32 rows at most, the rest is "other"
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local l = require "loopt"
            local x = require "rlm_test_exec"
            -- first names a label cannot take as they are (while the
            -- table has room): counted as "other", never printed
            local names = {
                'evil"} 1\nrlm_fake_total{a="',
                "back\\slash",
                "caf\xc3\xa9",
                string.rep("x", 65),
            }
            for i = 1, 40 do
                names[#names + 1] = "rand-" .. i .. "-" .. math.random(1e9)
            end
            local statuses = {}
            for _, name in ipairs(names) do
                local res = l.complete(l.ask("hi", { model = name,
                                       rlm = { max_iterations = 1 } }))
                local k = tostring(res.status)
                statuses[k] = (statuses[k] or 0) + 1
                -- 44 live sandboxes are more than this test needs
                local sid = res.headers["x-rlm-session-id"]
                if sid then
                    t.delete(sid)
                end
            end
            ngx.say("statuses: ", require("cjson").encode(statuses))
            local m, res = t.metrics()
            local rows, total = {}, 0
            for k, v in pairs(m) do
                local model = k:match('^rlm_completions_total{model="([^"]*)"')
                if model then
                    rows[model] = true
                    total = total + v
                end
            end
            local n = 0
            for _ in pairs(rows) do n = n + 1 end
            ngx.say("rows at most 33: ", n <= 33, " other row: ",
                    rows.other == true)
            ngx.say("all counted: ", total >= #names)
            ngx.say("fake family: ", res.body:find("rlm_fake_total", 1, true)
                                     ~= nil)
            local other = m['rlm_completions_total{model="other",outcome="length"}']
            ngx.say("other holds the overflow and the 4 odd names: ",
                    other ~= nil and other >= 12)
            local f = assert(io.open("$TEST_NGINX_PROM_DIR/metrics.txt", "w"))
            f:write(res.body)
            f:close()
            ngx.say("promtool: [", x.run("$TEST_NGINX_PROMTOOL check metrics"
                .. " < $TEST_NGINX_PROM_DIR/metrics.txt"), "]")
        }
    }
--- request
GET /t
--- timeout: 120
--- response_body
statuses: {"200":44}
rows at most 33: true other row: true
all counted: true
fake family: false
other holds the overflow and the 4 odd names: true
promtool: []



=== TEST 4: a real Prometheus scrapes /metrics; its API answers with the values; the alert rules load and evaluate
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local l = require "loopt"
            local x = require "rlm_test_exec"
            local cjson = require "cjson.safe"
            local dir = "$TEST_NGINX_PROM_DIR"
            local port = "$TEST_NGINX_PROM_PORT"
            local rules = "$TEST_NGINX_RLM_ROOT/deploy/prometheus/"
                          .. "ngx-rlm-alerts.yml"

            ngx.say("promtool rules: ",
                    (x.run("$TEST_NGINX_PROMTOOL check rules " .. rules)
                     :match("SUCCESS: %d+ rules found") or "failed"))

            -- work to count: two completions and a few cells
            local before = t.metrics()
            local ask = { content = l.repl("r = llm_query('hi')") }
            local final = { content = l.repl("answer.update(content=r,"
                                             .. " ready=True)") }
            l.script("root", { ask, final, ask, final })
            for i = 1, 2 do
                l.complete(l.ask("go", { context = "x",
                           rlm = { sub_model = "echo" } }))
            end
            local id = t.create()
            t.eval(id, "x = 1")
            t.eval(id, "x += 1")
            t.eval(id, "1/0")
            local m = t.metrics()
            for _, k in ipairs({
                'rlm_completions_total{model="script:root",outcome="stop"}',
                'rlm_subcalls_total{model="echo",fn="llm_query"}',
                'rlm_cells_total{status="error"}',
            }) do
                ngx.say(k, " +", (m[k] or 0) - (before[k] or 0))
            end

            -- tell the file's Prometheus where this nginx listens
            local f = assert(io.open(dir .. "/targets.json.tmp", "w"))
            f:write('[{"targets": ["127.0.0.1:', ngx.var.server_port,
                    '"]}]\n')
            f:close()
            assert(os.rename(dir .. "/targets.json.tmp",
                             dir .. "/targets.json"))

            local function query(q)
                local sock = ngx.socket.tcp()
                sock:settimeout(5000)
                if not sock:connect("127.0.0.1", tonumber(port)) then
                    return nil
                end
                local path = "/api/v1/query?query=" .. ngx.escape_uri(q)
                if q:sub(1, 1) == "/" then
                    path = q
                end
                sock:send("GET " .. path .. " HTTP/1.0\r\nHost: p\r\n\r\n")
                local body = sock:receive("*a")
                sock:close()
                return cjson.decode((body or ""):match("\r\n\r\n(.*)$") or "")
            end

            local function value(q)
                local j = query(q)
                local r = j and j.data and j.data.result
                return r and r[1] and tonumber(r[1].value[2])
            end

            -- wait (bounded) for the scrapes to carry what /metrics said
            local want = {
                ['up{job="ngx_rlm"}'] = 1,
                ['rlm_completions_total{model="script:root",outcome="stop"}']
                    = m['rlm_completions_total{model="script:root",outcome="stop"}'],
                ['rlm_model_calls_total{model="echo",code="ok",status="2xx"}']
                    = m['rlm_model_calls_total{model="echo",code="ok",status="2xx"}'],
                ['rlm_subcalls_total{model="echo",fn="llm_query"}']
                    = m['rlm_subcalls_total{model="echo",fn="llm_query"}'],
                ['rlm_cells_total{status="error"}']
                    = m['rlm_cells_total{status="error"}'],
                ['rlm_model_call_duration_seconds_count{model="script:root"}']
                    = m['rlm_model_call_duration_seconds_count{model="script:root"}'],
                ['sum(rlm_sandbox_acquires_total{tier="native"})'] = true,
                ['count(ngx_rlm_build_info{python_version!=""})'] = 1,
            }
            local seen = {}
            for i = 1, 600 do
                local all = true
                for q, v in pairs(want) do
                    if not seen[q] then
                        local got = value(q)
                        if got ~= nil and (v == true or got == v) then
                            seen[q] = got
                        else
                            all = false
                        end
                    end
                end
                if all then break end
                ngx.sleep(0.1)
            end
            local keys = {}
            for q in pairs(want) do keys[#keys + 1] = q end
            table.sort(keys)
            for _, q in ipairs(keys) do
                ngx.say(q, ": ", seen[q] ~= nil and "as /metrics said"
                                 or "missing")
            end

            -- the rules evaluate without errors against these series
            local healthy, rules_n = true, 0
            for i = 1, 100 do
                local j = query("/api/v1/rules")
                healthy, rules_n = true, 0
                for _, g in ipairs(j and j.data and j.data.groups or {}) do
                    for _, r in ipairs(g.rules or {}) do
                        rules_n = rules_n + 1
                        if r.health ~= "ok" then healthy = false end
                    end
                end
                if rules_n > 0 and healthy then break end
                ngx.sleep(0.1)
            end
            ngx.say("rules loaded: ", rules_n > 0, " all healthy: ", healthy)

        }
    }
--- request
GET /t
--- timeout: 120
--- response_body
promtool rules: SUCCESS: 8 rules found
rlm_completions_total{model="script:root",outcome="stop"} +2
rlm_subcalls_total{model="echo",fn="llm_query"} +2
rlm_cells_total{status="error"} +1
count(ngx_rlm_build_info{python_version!=""}): as /metrics said
rlm_cells_total{status="error"}: as /metrics said
rlm_completions_total{model="script:root",outcome="stop"}: as /metrics said
rlm_model_call_duration_seconds_count{model="script:root"}: as /metrics said
rlm_model_calls_total{model="echo",code="ok",status="2xx"}: as /metrics said
rlm_subcalls_total{model="echo",fn="llm_query"}: as /metrics said
sum(rlm_sandbox_acquires_total{tier="native"}): as /metrics said
up{job="ngx_rlm"}: as /metrics said
rules loaded: true all healthy: true



=== TEST 5: the Grafana dashboard and the alert rules only name families /metrics has
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local cjson = require "cjson.safe"
            local _, res = t.metrics()
            local have = {}
            for fam in res.body:gmatch("# TYPE (%S+) ") do
                have[fam] = true
            end
            local function check(what, text)
                local n, bad = 0, {}
                for name in text:gmatch("[%w_]+") do
                    if name:match("^rlm_") or name:match("^ngx_rlm_") then
                        local fam = name:gsub("_bucket$", "")
                        if not have[fam] then
                            bad[#bad + 1] = name
                        end
                        n = n + 1
                    end
                end
                ngx.say(what, ": ", n > 0 and "names found" or "none",
                        ", unknown: [", table.concat(bad, " "), "]")
            end
            local root = "$TEST_NGINX_RLM_ROOT/deploy/"
            local f = assert(io.open(root .. "grafana/ngx-rlm-dashboard.json"))
            local dash = cjson.decode(f:read("*a"))
            f:close()
            local exprs = {}
            for _, p in ipairs(dash.panels) do
                for _, tg in ipairs(p.targets or {}) do
                    exprs[#exprs + 1] = tg.expr
                end
            end
            for _, v in ipairs(dash.templating.list) do
                if type(v.query) == "table" then
                    exprs[#exprs + 1] = v.query.query
                end
            end
            ngx.say("dashboard panels: ", #dash.panels > 10)
            check("dashboard", table.concat(exprs, "\n"))
            -- the expressions of the rules: from "expr:" to the next key
            f = assert(io.open(root .. "prometheus/ngx-rlm-alerts.yml"))
            local rules, inexpr = {}, false
            for line in f:lines() do
                if line:match("^%s+expr:") then
                    inexpr = true
                elseif line:match("^%s+[%w_]+:") or line:match("^%s*- ") then
                    inexpr = false
                end
                if inexpr then
                    rules[#rules + 1] = line
                end
            end
            f:close()
            check("rules", table.concat(rules, "\n"))
        }
    }
--- request
GET /t
--- response_body
dashboard panels: true
dashboard: names found, unknown: []
rules: names found, unknown: []
