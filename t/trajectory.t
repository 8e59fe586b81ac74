# Trajectories (one JSONL file per completion, in the reference RLM
# library's log format): the writer, reached through LuaJIT's FFI as the
# completion loop calls it, and the HTTP routes that list and serve the
# files, with the sessions API's owner check.  Real nginx, real
# rlm-sandboxd.

use FindBin;
use lib "$FindBin::Bin/api_lib";
use RlmTest 'no_plan';
use RlmApi;

# trajt: helpers shared by the blocks (placing files, FFI declarations)
add_block_preprocessor(sub {
    my $block = shift;

    my $http = $block->http_config // '';
    $block->set_value('http_config', $http . <<'_EOC_');
    init_by_lua_block {
        local ffi = require "ffi"

        ffi.cdef[[
            typedef struct {
                size_t                len;
                const unsigned char  *data;
            } rlmt_str_t;

            typedef struct rlmt_json_s  rlmt_json_t;

            rlmt_json_t *json_loads(const char *input, size_t flags,
                void *error);
            void json_delete(rlmt_json_t *json);

            extern void *ngx_cycle;
            void *ngx_create_pool(size_t size, void *log);
            void ngx_destroy_pool(void *pool);

            void *ngx_http_rlm_trajectory_open(void *pool, void *log,
                rlmt_str_t *dir, const unsigned char *session_hex,
                rlmt_str_t *completion_id, rlmt_json_t *meta);
            intptr_t ngx_http_rlm_trajectory_iteration(void *t,
                rlmt_json_t *iteration);
            void ngx_http_rlm_trajectory_close(void *t);
            intptr_t ngx_http_rlm_trajectory_forget(void *log,
                rlmt_str_t *dir, const unsigned char *session_hex);
        ]]

        local M = { dir = "$TEST_NGINX_SERVER_ROOT/traj_temp" }

        function M.sh(cmd)
            local f = io.popen(cmd)
            local out = f:read("*a")
            f:close()
            return (out:gsub("%s+$", ""))
        end

        -- place a trajectory file as the writer would
        function M.put(sid, cid, content, dir)
            dir = (dir or M.dir) .. "/" .. sid
            os.execute("mkdir -p -m 0700 '" .. dir .. "'")
            local f = assert(io.open(dir .. "/" .. cid .. ".jsonl", "w"))
            f:write(content)
            f:close()
        end

        -- fixed ids: drop what an earlier run of the suite left
        function M.clean(sid)
            os.execute("rm -rf " .. M.dir .. "/" .. sid .. "*")
        end

        function M.path(sid, cid)
            return "/v1/sessions/" .. sid .. "/trajectories"
                   .. (cid and ("/" .. cid) or "")
        end

        function M.str(s)
            local v = ffi.new("rlmt_str_t")
            v.len = #s
            v.data = s
            return v
        end

        -- JSON_ALLOW_NUL: strings from code output may hold NUL bytes
        function M.json(s)
            return ffi.C.json_loads(s, 0x10, nil)
        end

        function M.log()
            return ffi.cast("void **", ffi.C.ngx_cycle)[2]
        end

        package.loaded.trajt = M
    }
_EOC_

    my $config = $block->config // '';
    if ($config !~ /#\s*own trajectories location/) {
        $block->set_value('config', <<'_EOC_' . $config);
    location ~ ^/v1/sessions/[^/]+/trajectories(/.*)?$ { rlm_trajectories; }
_EOC_
    }
});

no_shuffle();
run_tests();

__DATA__

=== TEST 1: the writer: metadata line, iteration lines in the reference's keys
--- http_config
    rlm_trajectory_dir $TEST_NGINX_SERVER_ROOT/traj_temp;
--- config
    location = /t {
        content_by_lua_block {
            local ffi = require "ffi"
            local cjson = require "cjson.safe"
            local t = require "rlmt"
            local tt = require "trajt"
            local C = ffi.C

            local sid = t.create()
            local cid = "chatcmpl-0a1B2c3D"
            local log = tt.log()
            local pool = C.ngx_create_pool(4096, log)

            local meta = tt.json(cjson.encode{
                root_model = "root-m", sub_model = "sub-m",
                provider = "openai", max_depth = 1, max_iterations = 30,
                depth = 0, completion_id = cid, session = sid,
                created = 1764465600, system_prompt = "You are an RLM." })

            local dir, id = tt.str(tt.dir), tt.str(cid)
            local tr = C.ngx_http_rlm_trajectory_open(pool, log, dir, sid,
                                                      id, meta)
            ngx.say("open: ", tr ~= nil)

            local prompt = {
                { role = "system", content = "You are an RLM." },
                { role = "user", content = "turn 1/30: h\195\169llo \226\156\147" },
            }
            local it1 = tt.json(cjson.encode{
                iteration = 1, prompt = prompt,
                response = "```repl\nprint(1)\n```",
                code_blocks = {
                    { code = "print(1)",
                      result = { status = "ok", stdout = "1\n\0end",
                                 stderr = "", error = cjson.null,
                                 execution_time = 0.25,
                                 rlm_calls = {
                                     { fn = "llm_query", model = "sub-m",
                                       prompt = "sum this", response = "3",
                                       prompt_tokens = 11,
                                       completion_tokens = 2,
                                       execution_time = 0.5 } } } },
                    { code = "1/0",
                      result = { status = "error", stdout = "",
                                 stderr = "warn\n",
                                 error = { ename = "ZeroDivisionError",
                                           evalue = "division by zero",
                                           traceback = "Traceback: ZeroDivisionError: division by zero\n" },
                                 execution_time = 0.125, rlm_calls = {} } },
                    { code = "x",
                      result = { status = "error", stdout = "", stderr = "",
                                 error = { ename = "NameError",
                                           evalue = "name 'x' is not defined",
                                           traceback = "" },
                                 execution_time = 0.0625, rlm_calls = {} } },
                },
                final_answer = cjson.null, iteration_time = 1.5,
                usage = { prompt_tokens = 100, completion_tokens = 20 } })
            local it2 = tt.json(cjson.encode{
                iteration = 2, prompt = prompt, response = "FINAL(42)",
                code_blocks = {}, final_answer = "42", iteration_time = 0.75,
                usage = { prompt_tokens = 120, completion_tokens = 5 } })

            ngx.say("iteration 1: ", tonumber(C.ngx_http_rlm_trajectory_iteration(tr, it1)))
            ngx.say("iteration 2: ", tonumber(C.ngx_http_rlm_trajectory_iteration(tr, it2)))

            -- the caller's json is not stolen: freeing it is still right
            C.json_delete(it1)
            C.json_delete(it2)
            C.json_delete(meta)

            C.ngx_http_rlm_trajectory_close(tr)
            ngx.say("after close: ", tonumber(C.ngx_http_rlm_trajectory_iteration(tr, nil)))
            C.ngx_destroy_pool(pool)

            local file = tt.dir .. "/" .. sid .. "/" .. cid .. ".jsonl"
            ngx.say("modes: dir=", tt.sh("stat -c %a " .. tt.dir),
                    " session dir=", tt.sh("stat -c %a " .. tt.dir .. "/" .. sid),
                    " file=", tt.sh("stat -c %a " .. file))

            local f = io.open(file)
            local raw = f:read("*a")
            f:close()

            local lines = {}
            for line in raw:gmatch("([^\n]*)\n") do
                lines[#lines + 1] = line
            end
            ngx.say("lines: ", #lines, " ends with a newline: ",
                    raw:sub(-1) == "\n")

            local m = cjson.decode(lines[1])
            ngx.say("metadata: type=", m.type, " root_model=", m.root_model,
                    " max_depth=", m.max_depth,
                    " max_iterations=", m.max_iterations,
                    " backend=", m.backend,
                    " backend_kwargs.model_name=", m.backend_kwargs.model_name,
                    " environment_type=", m.environment_type,
                    " environment_kwargs=", cjson.encode(m.environment_kwargs),
                    " other_backends=", tostring(m.other_backends == cjson.null))
            ngx.say("metadata, ours: sub_model=", m.sub_model, " depth=",
                    m.depth, " completion_id=", m.completion_id == cid,
                    " session=", m.session == sid, " created=", m.created,
                    " system_prompt=", m.system_prompt)
            ngx.say("timestamp: ", m.timestamp:match(
                "^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%d%d%d%d%+00:00$")
                ~= nil)

            local i = cjson.decode(lines[2])
            ngx.say("iteration: type=", i.type, " iteration=", i.iteration,
                    " prompt=", #i.prompt, " ", i.prompt[2].role, " ",
                    i.prompt[2].content == prompt[2].content,
                    " response=", t.q(i.response),
                    " final_answer null=", tostring(i.final_answer == cjson.null),
                    " iteration_time=", i.iteration_time,
                    " usage=", i.usage.prompt_tokens, "/",
                    i.usage.completion_tokens)
            ngx.say("raw UTF-8 kept: ", lines[2]:find("h\195\169llo \226\156\147", 1, true) ~= nil)

            local b = i.code_blocks
            local r1 = b[1].result
            ngx.say("block 1: code=", t.q(b[1].code), " stdout NUL kept=",
                    r1.stdout == "1\n\0end", " stderr=", t.q(r1.stderr),
                    " locals=", cjson.encode(r1.locals),
                    " execution_time=", r1.execution_time,
                    " status=", r1.status,
                    " error null=", tostring(r1.error == cjson.null))
            local c = r1.rlm_calls[1]
            local u = c.usage_summary.model_usage_summaries["sub-m"]
            ngx.say("call: root_model=", c.root_model, " prompt=", c.prompt,
                    " response=", c.response, " execution_time=",
                    c.execution_time, " prompt_tokens=", c.prompt_tokens,
                    " completion_tokens=", c.completion_tokens, " fn=", c.fn,
                    " usage_summary=", u.total_calls, "/",
                    u.total_input_tokens, "/", u.total_output_tokens)
            ngx.say("block 2: stderr=", t.q(b[2].result.stderr),
                    " error.ename=", b[2].result.error.ename)
            ngx.say("block 3: stderr=", t.q(b[3].result.stderr))

            local i2 = cjson.decode(lines[3])
            ngx.say("iteration 2: ", i2.type, " ", i2.iteration, " final=",
                    i2.final_answer, " blocks=", #i2.code_blocks)

            -- and over HTTP, byte for byte
            local r = t.http("GET", tt.path(sid, cid))
            ngx.say("GET: ", r.status, " ", r.headers["content-type"],
                    " same bytes: ", r.body == raw)
            r = t.http("GET", tt.path(sid))
            ngx.say("list: ", r.json.data[1].id == cid, " bytes=",
                    r.json.data[1].bytes == #raw)
        }
    }
--- request
GET /t
--- response_body
open: true
iteration 1: 0
iteration 2: 0
after close: -1
modes: dir=700 session dir=700 file=600
lines: 3 ends with a newline: true
metadata: type=metadata root_model=root-m max_depth=1 max_iterations=30 backend=openai backend_kwargs.model_name=root-m environment_type=ngx_rlm environment_kwargs={} other_backends=true
metadata, ours: sub_model=sub-m depth=0 completion_id=true session=true created=1764465600 system_prompt=You are an RLM.
timestamp: true
iteration: type=iteration iteration=1 prompt=2 user true response="```repl\nprint(1)\n```" final_answer null=true iteration_time=1.5 usage=100/20
raw UTF-8 kept: true
block 1: code="print(1)" stdout NUL kept=true stderr="" locals={} execution_time=0.25 status=ok error null=true
call: root_model=sub-m prompt=sum this response=3 execution_time=0.5 prompt_tokens=11 completion_tokens=2 fn=llm_query usage_summary=1/11/2
block 2: stderr="warn\nTraceback: ZeroDivisionError: division by zero\n" error.ename=ZeroDivisionError
block 3: stderr="NameError: name 'x' is not defined"
iteration 2: iteration 2 final=42 blocks=0
GET: 200 application/x-ndjson same bytes: true
list: true bytes=true



=== TEST 2: the writer refuses to overwrite a file, bad ids and a missing directory
--- http_config
    rlm_trajectory_dir $TEST_NGINX_SERVER_ROOT/traj_temp;
--- config
    location = /t {
        content_by_lua_block {
            local ffi = require "ffi"
            local t = require "rlmt"
            local tt = require "trajt"
            local C = ffi.C

            local sid = t.create()
            local log = tt.log()
            local pool = C.ngx_create_pool(4096, log)
            local meta = tt.json('{"root_model":"m"}')
            local dir = tt.str(tt.dir)

            local function open(s, cid, d)
                return C.ngx_http_rlm_trajectory_open(pool, log, d or dir, s,
                                                      tt.str(cid), meta)
            end

            tt.put(sid, "chatcmpl-taken", "precious\n")
            ngx.say("existing file: ", open(sid, "chatcmpl-taken") == nil)
            local f = io.open(tt.dir .. "/" .. sid .. "/chatcmpl-taken.jsonl")
            ngx.say("left as it was: ", f:read("*a") == "precious\n")
            f:close()

            for _, bad in ipairs({ "../../../tmp/x", "chatcmpl-a/b",
                                   "chatcmpl-", "chatcmpl-a.b", "x" }) do
                ngx.say("completion id ", t.q(bad), ": ",
                        open(sid, bad) == nil)
            end
            ngx.say("session id ../: ",
                    open("../../../../../../tmp/aaaaaaaaaaaaaa", "chatcmpl-1") == nil)

            local gone = tt.str(tt.dir .. "/not-there")
            ngx.say("missing directory: ", open(sid, "chatcmpl-2", gone) == nil)
            ngx.say("a NULL trajectory: ",
                    tonumber(C.ngx_http_rlm_trajectory_iteration(nil, meta)))

            C.json_delete(meta)
            C.ngx_destroy_pool(pool)

            ngx.say("nothing else written: ",
                    tt.sh("ls " .. tt.dir .. "/" .. sid))
        }
    }
--- request
GET /t
--- response_body
existing file: true
left as it was: true
completion id "../../../tmp/x": true
completion id "chatcmpl-a/b": true
completion id "chatcmpl-": true
completion id "chatcmpl-a.b": true
completion id "x": true
session id ../: true
missing directory: true
a NULL trajectory: -1
nothing else written: chatcmpl-taken.jsonl
--- error_log eval
[qr/open\(\) ".*chatcmpl-taken\.jsonl" failed, no trajectory \(17: File exists\)/,
 qr/no trajectory for an invalid session or completion id/,
 qr/mkdir\(\) ".*not-there\/[0-9a-f]{32}" failed, no trajectory \(2: No such file or directory\)/]
--- no_error_log
[error]
[emerg]



=== TEST 3: list and get: only valid trajectory files, oldest first, exact bytes
--- http_config
    rlm_trajectory_dir $TEST_NGINX_SERVER_ROOT/traj_temp;
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local tt = require "trajt"
            local sid = t.create()

            local r = t.http("GET", tt.path(sid))
            ngx.say("empty: ", r.status, " ", r.json.object, " ",
                    r.json.session == sid, " n=", #r.json.data)

            local z = '{"type":"metadata","root_model":"m"}\n'
                      .. '{"type":"iteration","iteration":1}\n'
            tt.put(sid, "chatcmpl-zzz", z)
            -- a later second, so the two files are ordered by time
            ngx.sleep(1.1)
            tt.put(sid, "chatcmpl-aaa", '{"type":"metadata"}\n')

            -- none of these is listed or served
            tt.put(sid, "notes", "x")
            os.execute("cd " .. tt.dir .. "/" .. sid .. " && echo x > chatcmpl-bad.id.jsonl"
                       .. " && mkdir chatcmpl-dir.jsonl"
                       .. " && ln -s /etc/hostname chatcmpl-link.jsonl")

            r = t.http("GET", tt.path(sid))
            local ids = {}
            for _, e in ipairs(r.json.data) do
                ids[#ids + 1] = e.id .. ":" .. e.object .. ":" .. e.bytes
                                .. ":" .. tostring(math.abs(e.created - ngx.time()) < 600)
            end
            ngx.say("list: ", r.status, " ", r.headers["content-type"], " ",
                    table.concat(ids, " "))
            r = t.http("GET", tt.path(sid) .. "/")
            ngx.say("list with a slash: ", r.status, " n=", #r.json.data)

            r = t.http("GET", tt.path(sid, "chatcmpl-zzz"))
            ngx.say("get: ", r.status, " ", r.headers["content-type"], " ",
                    r.headers["content-length"], " same: ", r.body == z,
                    " last-modified: ", r.headers["last-modified"] ~= nil)
            -- as the Lua bridge reads it: a subrequest, the file read
            -- into memory by nginx's output chain
            local cap = ngx.location.capture(tt.path(sid, "chatcmpl-zzz"))
            ngx.say("subrequest: ", cap.status, " same: ", cap.body == z)
            r = t.http("HEAD", tt.path(sid, "chatcmpl-zzz"))
            ngx.say("head: ", r.status, " ", r.headers["content-length"],
                    " body=", t.q(r.body))

            ngx.say("symlink: ", t.envelope(t.http("GET", tt.path(sid, "chatcmpl-link"))))
            ngx.say("directory: ", t.envelope(t.http("GET", tt.path(sid, "chatcmpl-dir"))))
            ngx.say("unknown: ", t.envelope(t.http("GET", tt.path(sid, "chatcmpl-nothere"))))
            ngx.say("not an id: ", t.envelope(t.http("GET", tt.path(sid, "notes"))))

            -- a completion still being written: whole lines only
            tt.put(sid, "chatcmpl-partial", '{"type":"metadata"}\n{"type":"iter')
            r = t.http("GET", tt.path(sid, "chatcmpl-partial"))
            ngx.say("partial: ", r.status, " ", t.q(r.body))
            tt.put(sid, "chatcmpl-noline", '{"type":"meta')
            r = t.http("GET", tt.path(sid, "chatcmpl-noline"))
            ngx.say("no whole line: ", r.status, " ",
                    r.headers["content-length"], " ", t.q(r.body))

            -- another session's trajectory is not reachable through this one
            local other = t.create()
            tt.put(other, "chatcmpl-other", "other\n")
            ngx.say("other session's id here: ",
                    t.envelope(t.http("GET", tt.path(sid, "chatcmpl-other"))))
            ngx.say("there: ", t.http("GET", tt.path(other, "chatcmpl-other")).status)
        }
    }
--- request
GET /t
--- response_body
empty: 200 list true n=0
list: 200 application/json chatcmpl-zzz:rlm.trajectory:72:true chatcmpl-aaa:rlm.trajectory:20:true
list with a slash: 200 n=2
get: 200 application/x-ndjson 72 same: true last-modified: true
subrequest: 200 same: true
head: 200 72 body=""
symlink: 404 trajectory_not_found invalid_request_error
directory: 404 trajectory_not_found invalid_request_error
unknown: 404 trajectory_not_found invalid_request_error
not an id: 400 invalid_completion_id invalid_request_error
partial: 200 "{"type":"metadata"}\n"
no whole line: 200 0 ""
other session's id here: 404 trajectory_not_found invalid_request_error
there: 200



=== TEST 4: path traversal: encoded dots, slashes, NUL, symlinks never reach a file
--- http_config
    rlm_trajectory_dir $TEST_NGINX_SERVER_ROOT/traj_temp;
--- config
    # no api locations
    # own trajectories location
    location ~ ^/v1/sessions/[^/]+/trajectories(/.*)?$ {
        rlm_session_owner $http_x_tenant;
        rlm_trajectories;
    }
    location /v1/sessions {
        rlm_session_owner $http_x_tenant;
        rlm_sessions_api;
    }
    # what a URI normalized out of the API reaches
    location /v1/ { return 404; }
    location = /t {
        # the file above the trajectory dir is at the top of the server
        # root, where the runners allow only their own dirs and *_temp:
        # gone before the response ends, whatever the driver did
        log_by_lua_block {
            os.remove("$TEST_NGINX_SERVER_ROOT/chatcmpl-up.jsonl")
        }
        content_by_lua_block {
            local t = require "rlmt"
            local tt = require "trajt"
            local function create(tenant)
                return t.http("POST", "/v1/sessions", "",
                              { ["X-Tenant"] = tenant }).json.id
            end
            local sid = create("mallory")
            local victim = create("alice")

            -- what mallory is after: alice's trajectory, a file next to
            -- the trajectory directory and one above it
            tt.put(victim, "chatcmpl-secret", "SECRET-A\n")
            local f = io.open(tt.dir .. "/chatcmpl-top.jsonl", "w")
            f:write("SECRET-B\n")
            f:close()
            f = io.open("$TEST_NGINX_SERVER_ROOT/chatcmpl-up.jsonl", "w")
            f:write("SECRET-C\n")
            f:close()
            tt.put(sid, "chatcmpl-mine", "mine\n")
            os.execute("ln -s ../" .. victim .. "/chatcmpl-secret.jsonl "
                       .. tt.dir .. "/" .. sid .. "/chatcmpl-link.jsonl")

            local base = "/v1/sessions/" .. sid .. "/trajectories/"
            local attempts = {
                base .. "../" .. victim .. "/chatcmpl-secret",
                base .. "..%2f" .. victim .. "%2fchatcmpl-secret",
                base .. "%2e%2e%2f" .. victim .. "%2fchatcmpl-secret",
                base .. "%2e%2e/%2e%2e/chatcmpl-top",
                base .. "..%2f..%2fchatcmpl-top",
                base .. "..%2f..%2f..%2fchatcmpl-up",
                base .. "chatcmpl-mine%00",
                base .. "chatcmpl-mine%00.txt",
                base .. "chatcmpl-mine%2f",
                base .. "chatcmpl-mine/",
                base .. "chatcmpl-mine.jsonl",
                base .. "chatcmpl-mine%2f..%2f..%2f" .. victim
                     .. "%2fchatcmpl-secret",
                base .. "%2fetc%2fpasswd",
                base .. "chatcmpl-link",
                "/v1/sessions/..%2f" .. victim
                    .. "/trajectories/chatcmpl-secret",
                "/v1/sessions/" .. sid .. "%2f..%2f" .. victim
                    .. "/trajectories/chatcmpl-secret",
                "/v1/sessions/" .. victim .. "/trajectories/chatcmpl-secret",
            }

            for n, uri in ipairs(attempts) do
                local r = t.http("GET", uri, nil, { ["X-Tenant"] = "mallory" })
                local leak = r.body:find("SECRET", 1, true)
                local code = type(r.json) == "table" and r.json.error
                             and r.json.error.code or "-"
                ngx.say(n, ": ", r.status, " ", code, leak and " LEAK" or "")
            end

            local r = t.http("GET", base .. "chatcmpl-mine", nil,
                             { ["X-Tenant"] = "mallory" })
            ngx.say("mine: ", r.body == "mine\n")
            r = t.http("GET", "/v1/sessions/" .. victim
                              .. "/trajectories/chatcmpl-secret", nil,
                       { ["X-Tenant"] = "alice" })
            ngx.say("alice reads hers: ", r.status, " ", r.body == "SECRET-A\n")
        }
    }
--- request
GET /t
--- response_body
1: 404 not_found
2: 404 not_found
3: 404 not_found
4: 400 invalid_session_id
5: 400 invalid_session_id
6: 404 -
7: 400 -
8: 400 -
9: 400 invalid_completion_id
10: 400 invalid_completion_id
11: 400 invalid_completion_id
12: 404 not_found
13: 400 invalid_completion_id
14: 404 trajectory_not_found
15: 404 -
16: 404 session_not_found
17: 404 session_not_found
mine: true
alice reads hers: 200 true



=== TEST 5: owners: another tenant's session has no trajectories to see
--- http_config
    rlm_trajectory_dir $TEST_NGINX_SERVER_ROOT/traj_temp;
--- config
    # no api locations
    # own trajectories location
    location ~ ^/v1/sessions/[^/]+/trajectories(/.*)?$ {
        rlm_session_owner $http_x_tenant;
        rlm_trajectories;
    }
    location /v1/sessions {
        rlm_session_owner $http_x_tenant;
        rlm_sessions_api;
    }
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local tt = require "trajt"
            local function as(tenant, path)
                return t.http("GET", path, nil,
                              tenant and { ["X-Tenant"] = tenant } or nil)
            end

            local r = t.http("POST", "/v1/sessions", "", { ["X-Tenant"] = "alice" })
            local id = r.json.id
            tt.put(id, "chatcmpl-a1", "alice's\n")

            r = as("alice", tt.path(id))
            ngx.say("alice lists: ", r.status, " n=", #r.json.data)
            ngx.say("alice gets: ", as("alice", tt.path(id, "chatcmpl-a1")).status)
            ngx.say("bob lists: ", t.envelope(as("bob", tt.path(id))))
            r = as("bob", tt.path(id, "chatcmpl-a1"))
            ngx.say("bob gets: ", t.envelope(r), " ",
                    tostring(r.body:find("alice's", 1, true)))
            ngx.say("anonymous gets: ", t.envelope(as(nil, tt.path(id, "chatcmpl-a1"))))
            ngx.say("bob, unknown completion: ",
                    t.envelope(as("bob", tt.path(id, "chatcmpl-zz"))))
        }
    }
--- request
GET /t
--- response_body
alice lists: 200 n=1
alice gets: 200
bob lists: 404 session_not_found invalid_request_error
bob gets: 404 session_not_found invalid_request_error nil
anonymous gets: 404 session_not_found invalid_request_error
bob, unknown completion: 404 session_not_found invalid_request_error



=== TEST 6: deleted sessions and a new session with a deleted one's id
--- http_config
    rlm_trajectory_dir $TEST_NGINX_SERVER_ROOT/traj_temp;
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local tt = require "trajt"
            local id = t.id(77)
            tt.clean(id)

            t.json_http("POST", "/v1/sessions", { id = id })
            tt.put(id, "chatcmpl-old", "first owner's\n")
            ngx.say("while it lives: ", t.http("GET", tt.path(id, "chatcmpl-old")).status)

            t.delete(id)
            ngx.say("deleted, list: ", t.envelope(t.http("GET", tt.path(id))))
            ngx.say("deleted, get: ",
                    t.envelope(t.http("GET", tt.path(id, "chatcmpl-old"))))

            -- file times have one-second resolution and the check a
            -- second of slack: let two pass before the id is taken again
            ngx.sleep(2.1)
            local r = t.json_http("POST", "/v1/sessions", { id = id })
            ngx.say("same id again: ", r.status)
            r = t.http("GET", tt.path(id))
            ngx.say("new session lists: ", r.status, " n=", #r.json.data)
            r = t.http("GET", tt.path(id, "chatcmpl-old"))
            ngx.say("new session gets the old one: ", t.envelope(r), " ",
                    tostring(r.body:find("first owner", 1, true)))
            tt.put(id, "chatcmpl-new", "second\n")
            r = t.http("GET", tt.path(id))
            ngx.say("its own: ", #r.json.data, " ", r.json.data[1].id)
        }
    }
--- request
GET /t
--- response_body
while it lives: 200
deleted, list: 404 session_not_found invalid_request_error
deleted, get: 404 session_not_found invalid_request_error
same id again: 201
new session lists: 200 n=0
new session gets the old one: 404 trajectory_not_found invalid_request_error nil
its own: 1 chatcmpl-new



=== TEST 7: forget: a reused id's earlier trajectories are moved out of reach
--- http_config
    rlm_trajectory_dir $TEST_NGINX_SERVER_ROOT/traj_temp;
--- config
    location = /t {
        content_by_lua_block {
            local ffi = require "ffi"
            local t = require "rlmt"
            local tt = require "trajt"
            local C = ffi.C
            local id = t.id(78)
            tt.clean(id)
            local dir = tt.str(tt.dir)

            t.json_http("POST", "/v1/sessions", { id = id })
            tt.put(id, "chatcmpl-old", "first owner's\n")
            t.delete(id)

            -- what session creation does when the id is taken again
            ngx.say("forget: ", tonumber(C.ngx_http_rlm_trajectory_forget(tt.log(), dir, id)))
            local r = t.json_http("POST", "/v1/sessions", { id = id })
            ngx.say("same id again, at once: ", r.status)
            r = t.http("GET", tt.path(id))
            ngx.say("new session lists: ", r.status, " n=", #r.json.data)
            ngx.say("old one: ", t.envelope(t.http("GET", tt.path(id, "chatcmpl-old"))))
            ngx.say("kept aside: ", tt.sh("cat " .. tt.dir .. "/" .. id
                                          .. ".*/chatcmpl-old.jsonl"))

            local fresh = t.id(79)
            ngx.say("nothing to forget: ",
                    tonumber(C.ngx_http_rlm_trajectory_forget(tt.log(), dir, fresh)),
                    " ", tt.sh("ls " .. tt.dir .. " | grep -c " .. fresh))
            ngx.say("bad id: ", tonumber(C.ngx_http_rlm_trajectory_forget(
                    tt.log(), dir, "../../../../../../../../tmp/xxxxxx")))
            ngx.say("no directory configured: ", tonumber(
                    C.ngx_http_rlm_trajectory_forget(tt.log(), nil, id)))
        }
    }
--- request
GET /t
--- response_body
forget: 0
same id again, at once: 201
new session lists: 200 n=0
old one: 404 trajectory_not_found invalid_request_error
kept aside: first owner's
nothing to forget: 0 0
bad id: -1
no directory configured: 0
--- error_log eval
qr/trajectories of an earlier session 0{30}4e kept in ".*\/traj_temp\/0{30}4e\.\d+\.\d+"/
--- no_error_log
[error]
[alert]
[emerg]



=== TEST 8: methods, ids and routes
--- http_config
    rlm_trajectory_dir $TEST_NGINX_SERVER_ROOT/traj_temp;
--- config
    location /other/ { rlm_trajectories; }
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local tt = require "trajt"
            local sid = t.create()
            tt.put(sid, "chatcmpl-m", "m\n")

            for _, m in ipairs({ "POST", "PUT", "DELETE", "PATCH" }) do
                local r = t.http(m, tt.path(sid, "chatcmpl-m"), "{}")
                ngx.say(m, ": ", t.envelope(r), " allow=", r.headers["allow"])
            end
            local r = t.http("DELETE", tt.path(sid))
            ngx.say("DELETE list: ", t.envelope(r), " allow=", r.headers["allow"])
            ngx.say("still there: ", t.http("GET", tt.path(sid, "chatcmpl-m")).status)

            ngx.say("bad session id: ",
                    t.envelope(t.http("GET", tt.path("ABC", "chatcmpl-m"))))
            ngx.say("unknown session: ",
                    t.envelope(t.http("GET", tt.path(t.id(5), "chatcmpl-m"))))
            ngx.say("unknown session, list: ",
                    t.envelope(t.http("GET", tt.path(t.id(5)))))
            ngx.say("long id: ", t.envelope(t.http("GET",
                    tt.path(sid, "chatcmpl-" .. string.rep("a", 65)))))
            ngx.say("longest id: ", t.envelope(t.http("GET",
                    tt.path(sid, "chatcmpl-" .. string.rep("a", 64)))))
            ngx.say("no route: ", t.envelope(t.http("GET", "/other/x")))
            ngx.say("no route, sessions: ",
                    t.envelope(t.http("GET", "/other/sessions/" .. sid .. "/cells")))
            ngx.say("other prefix: ", t.q(t.http("GET",
                    "/other/sessions/" .. sid .. "/trajectories/chatcmpl-m").body))
        }
    }
--- request
GET /t
--- response_body
POST: 405 method_not_allowed invalid_request_error allow=GET, HEAD
PUT: 405 method_not_allowed invalid_request_error allow=GET, HEAD
DELETE: 405 method_not_allowed invalid_request_error allow=GET, HEAD
PATCH: 405 method_not_allowed invalid_request_error allow=GET, HEAD
DELETE list: 405 method_not_allowed invalid_request_error allow=GET, HEAD
still there: 200
bad session id: 400 invalid_session_id invalid_request_error
unknown session: 404 session_not_found invalid_request_error
unknown session, list: 404 session_not_found invalid_request_error
long id: 400 invalid_completion_id invalid_request_error
longest id: 404 trajectory_not_found invalid_request_error
no route: 404 not_found invalid_request_error
no route, sessions: 404 not_found invalid_request_error
other prefix: "m\n"



=== TEST 9: without rlm_trajectory_dir the routes answer 404 and say why
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local tt = require "trajt"
            local sid = t.create()
            local r = t.http("GET", tt.path(sid))
            ngx.say("list: ", t.envelope(r), " ", r.json.error.message)
            r = t.http("GET", tt.path(sid, "chatcmpl-x"))
            ngx.say("get: ", t.envelope(r))
        }
    }
--- request
GET /t
--- response_body
list: 404 not_found invalid_request_error trajectories are not enabled on this server (rlm_trajectory_dir is not set)
get: 404 not_found invalid_request_error



=== TEST 10: a relative rlm_trajectory_dir is under the prefix, made 0700 at start
--- http_config
    rlm_trajectory_dir traj_temp/;
--- config
    location = /t {
        content_by_lua_block {
            local tt = require "trajt"
            ngx.say(tt.sh("stat -c '%F %a' $TEST_NGINX_SERVER_ROOT/traj_temp"))
        }
    }
--- request
GET /t
--- response_body
directory 700



=== TEST 11: rlm_trajectory_dir "/" is refused
--- http_config
    # no sandboxd
    rlm_trajectory_dir /;
--- config
--- must_die
--- error_log
"rlm_trajectory_dir" directive must not be the root directory



=== TEST 12: rlm_trajectory_dir only once
--- http_config
    # no sandboxd
    rlm_trajectory_dir $TEST_NGINX_SERVER_ROOT/a;
    rlm_trajectory_dir $TEST_NGINX_SERVER_ROOT/b;
--- config
--- must_die
--- error_log
"rlm_trajectory_dir" directive is duplicate
