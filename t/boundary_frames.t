# Frames a sandbox sends are hostile input (design brief, section 10).
# Code in a cell rewrites its own runtime: it rebinds the encoder that
# turns each result into a frame (rlm_repl._encode, called by dispatch()
# for every result), or writes bytes on its channel socket itself.
# Whatever it sends, the host makes it a typed `sandbox_error` of that
# cell, passes nothing of the frame on as is, cuts what is too large, and
# its worker lives on.
#
# Each block runs one worker; the driver location lives in it, so a
# worker crash also kills the driver's answer.  The second request of a
# block asks whether the worker is still the one that served the first.

use FindBin;
use lib "$FindBin::Bin/api_lib";
use lib "$FindBin::Bin/loop_lib";
use lib "$FindBin::Bin/boundary_lib";
use RlmTest 'no_plan';
use Boundary;

our $Worker = <<'CONF';
    location = /worker {
        content_by_lua_block {
            ngx.say("same worker: ",
                    ngx.shared.mock_llm:get("worker") == ngx.worker.pid())
        }
    }
CONF

add_block_preprocessor(sub {
    my $block = shift;
    $block->set_value('config', ($block->config // '') . $Worker);
});

no_shuffle();
run_tests();

__DATA__

=== TEST 1: eval: forged result frames through the runtime's encoder are a typed sandbox_error
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local b = require "boundary"
            ngx.shared.mock_llm:set("worker", ngx.worker.pid())
            local id = t.create()
            local r = t.eval(id, b.HOOK .. "\nprint('hooked')")
            ngx.say("hook: ", r.status, " ", t.q(r.stdout))
            local forged = {
                { "status 1", [[{"type":"result","status":1}]] },
                { "stdout object", [[{"type":"result","status":"ok","stdout":{"a":1}}]] },
                { "stdout list", [[{"type":"result","status":"ok","stdout":["x"]}]] },
                { "unknown status", [[{"type":"result","status":"pwned","stdout":"x"}]] },
                { "status crashed", [[{"type":"result","status":"crashed","stdout":"x"}]] },
                { "error not an object", [[{"type":"result","status":"error","error":"boom"}]] },
                { "ename not a string", [[{"type":"result","status":"error","error":{"ename":[1]}}]] },
                { "answer ready not bool", [[{"type":"result","status":"ok","answer":{"content":"x","ready":"yes"}}]] },
                { "answer content number", [[{"type":"result","status":"ok","answer":{"content":7,"ready":true}}]] },
                { "state_delta list", [[{"type":"result","status":"ok","state_delta":[1,2]}]] },
                { "duration negative", [[{"type":"result","status":"ok","duration_ms":-5}]] },
                { "no type", [[{"status":"ok","stdout":"x"}]] },
                { "not json", [[this is not json]] },
                { "json array", "[1, 2, 3]" },
                { "json string", [["ok"]] },
            }
            for _, f in ipairs(forged) do
                local j, res = t.eval(id, b.forge(f[2]))
                ngx.say(f[1], ": ", res.status, " ", tostring(j.status),
                        " stdout ", type(j.stdout), " ", t.q(j.stdout), " ",
                        type(j.error) == "table" and j.error.ename or "-")
            end
            t.say_cell("after", t.eval(id, "print('still here')"))
            ngx.say("logged: ",
                    b.log_has("sent a malformed frame: a result without a status"))
        }
    }
--- request eval
["GET /t", "GET /worker"]
--- response_body eval
["hook: ok \"hooked\\n\"
status 1: 200 sandbox_error stdout string \"\" ProtocolError
stdout object: 200 sandbox_error stdout string \"\" ProtocolError
stdout list: 200 sandbox_error stdout string \"\" ProtocolError
unknown status: 200 sandbox_error stdout string \"\" ProtocolError
status crashed: 200 sandbox_error stdout string \"\" ProtocolError
error not an object: 200 sandbox_error stdout string \"\" ProtocolError
ename not a string: 200 sandbox_error stdout string \"\" ProtocolError
answer ready not bool: 200 sandbox_error stdout string \"\" ProtocolError
answer content number: 200 sandbox_error stdout string \"\" ProtocolError
state_delta list: 200 sandbox_error stdout string \"\" ProtocolError
duration negative: 200 sandbox_error stdout string \"\" ProtocolError
no type: 200 sandbox_error stdout string \"\" ProtocolError
not json: 200 sandbox_error stdout string \"\" ProtocolError
json array: 200 sandbox_error stdout string \"\" ProtocolError
json string: 200 sandbox_error stdout string \"\" ProtocolError
after: status=ok stdout=\"still here\\n\"
logged: true
", "same worker: true\n"]
--- no_error_log
[alert]
exited on signal
[emerg]



=== TEST 2: eval: frames with broken lengths, written on the channel socket by the code itself
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local b = require "boundary"
            ngx.shared.mock_llm:set("worker", ngx.worker.pid())
            local id = t.create()
            local frames = {
                { "json_len 4 GiB", b.raw_frame(4294967295, 0) },
                { "json_len 16 MiB + 1", b.raw_frame(16 * 1024 * 1024 + 1, 0) },
                { "json_len 0", b.raw_frame(0, 0) },
                { "json_len 1", b.raw_frame(1, 0, "{") },
                { "right length, not JSON", b.raw_frame(8, 0, "garbage!") },
                { "right length, not an object", b.raw_frame(2, 0, "[]") },
            }
            for _, f in ipairs(frames) do
                local j, res = t.eval(id, f[2])
                ngx.say(f[1], ": ", res.status, " ", tostring(j.status),
                        " stdout ", type(j.stdout), " ",
                        type(j.error) == "table" and j.error.ename or "-")
            end
            t.say_cell("after", t.eval(id, "print('still here')"))
        }
    }
--- request eval
["GET /t", "GET /worker"]
--- response_body eval
["json_len 4 GiB: 200 sandbox_error stdout string ProtocolError
json_len 16 MiB + 1: 200 sandbox_error stdout string ProtocolError
json_len 0: 200 sandbox_error stdout string ProtocolError
json_len 1: 200 sandbox_error stdout string ProtocolError
right length, not JSON: 200 sandbox_error stdout string ProtocolError
right length, not an object: 200 sandbox_error stdout string ProtocolError
after: status=ok stdout=\"still here\\n\"
", "same worker: true\n"]
--- no_error_log
[alert]
exited on signal
[emerg]



=== TEST 3: eval: a forged stdout larger than rlm_output_max is cut on a character boundary, host side
--- http_config
    rlm_output_max 64k;
--- config
    location = /t {
        content_by_lua_block {
            local t = require "rlmt"
            local b = require "boundary"
            ngx.shared.mock_llm:set("worker", ngx.worker.pid())
            local id = t.create()
            t.eval(id, b.HOOK)
            local function try(label, frame)
                local j, res = t.eval(id, frame)
                local out = type(j.stdout) == "string" and j.stdout or ""
                local err = type(j.stderr) == "string" and j.stderr or ""
                ngx.say(label, ": ", res.status, " ", tostring(j.status),
                        " stdout ", #out, " stderr ", #err,
                        " within cap ", #out + #err <= 65536,
                        " utf-8 ", ngx.re.find(out .. err, "^.*$", "su") ~= nil)
            end
            -- 3 MiB of stdout, made up by the encoder (the runtime's own
            -- cap never saw it)
            try("3 MiB stdout", "FORGE = ('{\"type\":\"result\",\"status\":\"ok\",\"stdout\":\"'"
                .. " + 'x' * (3 * 1024 * 1024) + '\"}').encode()")
            -- two-byte characters, cut inside one at the cap
            try("utf-8 stdout", "FORGE = ('{\"type\":\"result\",\"status\":\"ok\",\"stdout\":\"x'"
                .. " + '\\u00e9' * 40000 + '\"}').encode()")
            try("stdout + stderr", "FORGE = ('{\"type\":\"result\",\"status\":\"ok\",\"stdout\":\"'"
                .. " + 'o' * 40000 + '\",\"stderr\":\"' + 'e' * 40000 + '\"}').encode()")
            -- an error cell keeps its status, the output is cut all the same
            try("error cell", "FORGE = ('{\"type\":\"result\",\"status\":\"error\",\"stdout\":\"'"
                .. " + 'x' * 100000 + '\",\"error\":{\"ename\":\"E\",\"evalue\":\"v\"}}').encode()")
            -- what the runtime sends itself is cut by the sandbox already
            local j = t.eval(id, "print('y' * 200000)")
            ngx.say("real: ", j.status, " ", #j.stdout <= 65536)
        }
    }
--- request eval
["GET /t", "GET /worker"]
--- response_body eval
["3 MiB stdout: 200 output_truncated stdout 65536 stderr 0 within cap true utf-8 true
utf-8 stdout: 200 output_truncated stdout 65535 stderr 0 within cap true utf-8 true
stdout + stderr: 200 output_truncated stdout 40000 stderr 25536 within cap true utf-8 true
error cell: 200 error stdout 65536 stderr 0 within cap true utf-8 true
real: output_truncated true
", "same worker: true\n"]
--- no_error_log
[alert]
exited on signal
[emerg]



=== TEST 4: completion: forged frames from the blocks of a loop; the model sees sandbox_error, the completion ends cleanly
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local b = require "boundary"
            ngx.shared.mock_llm:set("worker", ngx.worker.pid())
            l.script("root", {
                -- the first block rebinds the encoder and forges its own
                -- result: a status that is not a string
                { content = l.repl(b.HOOK,
                    b.forge([[{"type":"result","status":1}]])) },
                { content = l.repl(b.forge(
                    [[{"type":"result","status":"ok","stdout":{"a":1}}]])) },
                { content = l.repl(b.forge(
                    [[{"type":"result","status":"ok","answer":{"content":{"x":1},"ready":true}}]])) },
                -- (five failed blocks in a row would end the loop)
                { content = l.repl("print('between')") },
                { content = l.repl(b.forge("not json")) },
                { content = l.repl(b.raw_frame(4294967295, 0)) },
                { content = l.repl(
                    "answer.update(content='survived', ready=True)") },
            })
            local res = l.complete(l.ask("go", { context = "x" }))
            ngx.say(res.status, " ", l.answer(res), " ",
                    res.json.choices[1].finish_reason, " cells ",
                    res.json.rlm.cells)
            local reqs = l.requests("script:root")
            for i = 2, #reqs do
                local fed = l.last_message(reqs[i])
                ngx.say("fed ", i, ": ",
                        fed:match("Output of block 1 %((%a[%a_]*),"), " ",
                        fed:match("%[error%] (%a+):") or "-", " ",
                        fed:find('{"a"', 1, true) == nil)
            end
        }
    }
--- request eval
["GET /t", "GET /worker"]
--- response_body eval
["200 survived stop cells 7
fed 2: sandbox_error ProtocolError true
fed 3: sandbox_error ProtocolError true
fed 4: sandbox_error ProtocolError true
fed 5: ok - true
fed 6: sandbox_error ProtocolError true
fed 7: sandbox_error ProtocolError true
", "same worker: true\n"]
--- no_error_log
[alert]
exited on signal
[emerg]



=== TEST 5: completion: a child RLM forges its result frames; the child and the parent carry on
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local b = require "boundary"
            ngx.shared.mock_llm:set("worker", ngx.worker.pid())
            l.script("root", {
                { content = l.repl(
                    "r = rlm_query('child work')",
                    "answer.update(content='child said ' + r, ready=True)") },
            })
            l.script("child", {
                { content = l.repl(b.HOOK,
                    b.forge([[{"type":"result","status":null,"stdout":{"a":1}}]])) },
                { content = l.repl(b.forge("[]")) },
                { content = l.repl(
                    "answer.update(content='fine', ready=True)") },
            })
            local res = l.complete(l.ask("go", { context = "x",
                                   rlm = { sub_model = "script:child" } }))
            ngx.say(res.status, " ", l.answer(res))
            local reqs = l.requests("script:child")
            for i = 2, #reqs do
                local fed = l.last_message(reqs[i])
                ngx.say("child fed ", i, ": ",
                        fed:match("Output of block 1 %((%a[%a_]*),"))
            end
        }
    }
--- request eval
["GET /t", "GET /worker"]
--- response_body eval
["200 child said fine
child fed 2: sandbox_error
child fed 3: sandbox_error
", "same worker: true\n"]
--- no_error_log
[alert]
exited on signal
[emerg]



=== TEST 6: completion: a call frame forged as the block's result is policed like any call
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            local b = require "boundary"
            ngx.shared.mock_llm:set("worker", ngx.worker.pid())
            -- after the code ended, the encoder sends a call for a model
            -- the request may not use, then a batch past rlm_batch_max
            l.script("root", {
                { content = l.repl(b.HOOK, b.forge(
                    [[{"type":"call","id":1,"fn":"llm_query",]]
                    .. [["args":{"prompt":"forged-1","model":"premium"}}]])) },
                { content = l.repl("FORGE = ('{\"type\":\"call\",\"id\":2,"
                    .. "\"fn\":\"llm_query_batched\",\"args\":{\"prompts\":'"
                    .. " + str(['forged-2'] * 5000).replace(\"'\", '\"')"
                    .. " + '}}').encode()") },
                { content = l.repl(
                    "answer.update(content='done', ready=True)") },
            })
            local res = l.complete(l.ask("go", { context = "x" }))
            ngx.say(res.status, " ", l.answer(res))
            ngx.say("models upstream: ", table.concat(b.models_seen(), " "))
            ngx.say("forged prompts upstream: ",
                    b.upstream_saw('"content":"forged-'))
            local reqs = l.requests("script:root")
            for i = 2, #reqs do
                local fed = l.last_message(reqs[i])
                ngx.say("fed ", i, ": ",
                        fed:match("Output of block 1 %((%a[%a_]*),"), " ",
                        fed:match("%[error%] (%a+):") or "-")
            end
        }
    }
--- request eval
["GET /t", "GET /worker"]
--- response_body eval
["200 done
models upstream: script:root script:root script:root
forged prompts upstream: false
fed 2: error ProtocolError
fed 3: error ProtocolError
", "same worker: true\n"]
--- no_error_log
[alert]
exited on signal
[emerg]



=== TEST 7: completion: a session whose encoder a block rebound for good; the next completion's context load gets a forged result
--- config
    location = /t {
        content_by_lua_block {
            local l = require "loopt"
            ngx.shared.mock_llm:set("worker", ngx.worker.pid())
            -- from this block on, every result that is not a cell's
            -- (load_context, state_update, get_var) has a status that is
            -- not a string
            l.script("root", {
                { content = l.repl(
                    "_rt = FINAL.__globals__",
                    "_real = _rt['_encode']",
                    "def _poison(res):",
                    "    if 'stdout' not in res:",
                    "        return b'{\"type\":\"result\",\"status\":1}'",
                    "    return _real(res)",
                    "_rt['_encode'] = _poison",
                    "answer.update(content='first', ready=True)") },
            })
            local res = l.complete(l.ask("go", { context = "x" }))
            local sid = res.headers["x-rlm-session-id"]
            ngx.say("first: ", res.status, " ", l.answer(res))
            l.script("root", { { content = "FINAL(second)" } })
            for i = 1, 2 do
                res = l.complete(l.ask("again", { context = "y" }),
                                 { ["X-RLM-Session-Id"] = sid })
                ngx.say("next ", i, ": ", l.envelope(res))
            end
            ngx.say("root calls: ", #l.requests("script:root"))
            res = l.complete(l.ask("fresh", { context = "z" }))
            ngx.say("fresh session: ", res.status, " ", l.answer(res))
        }
    }
--- request eval
["GET /t", "GET /worker"]
--- response_body eval
["first: 200 first
next 1: 502 sandbox_error server_error
next 2: 502 sandbox_error server_error
root calls: 1
fresh session: 200 second
", "same worker: true\n"]
--- no_error_log
[alert]
exited on signal
[emerg]
