# The bundled demo model (lua/rlm/demo_model.lua) as the loop will use it:
# its answers are read by the module's own parser (through LuaJIT's FFI),
# and the ```repl code it writes really runs in Debian's CPython, calls
# llm_query() through the curl layer, and finds the needle.

use RlmTest 'no_plan';

add_block_preprocessor(sub {
    my $block = shift;

    my $http = $block->http_config // '';
    $block->set_value('http_config', <<'_EOC_' . $http);
    lua_shared_dict mock_llm 8m;
    rlm_provider demo url=http://127.0.0.1:$TEST_NGINX_SERVER_PORT/v1
                 model=rlm-demo retries=0 timeout=10s;
    init_by_lua_block {
        local ffi = require "ffi"
        ffi.cdef[[
            typedef struct {
                const unsigned char  *data;
                size_t                len;
            } ngx_http_rlm_slice_t;

            typedef struct {
                ngx_http_rlm_slice_t  blocks[64];
                size_t                nblocks;
                size_t                dropped;
                unsigned              unterminated:1;
                int                   final;
                ngx_http_rlm_slice_t  final_value;
            } ngx_http_rlm_response_t;

            void ngx_http_rlm_parse_response(const unsigned char *text,
                size_t len, ngx_http_rlm_response_t *res);
        ]]
    }
_EOC_

    my $config = $block->config // '';
    $block->set_value('config', <<'_EOC_' . $config);
    location = /v1/chat/completions {
        content_by_lua_block { require("mock_llm").serve() }
    }
    location = /chat { rlm_chat_passthrough demo; }
_EOC_
});

run_tests();

__DATA__

=== TEST 1: four turns: three repl blocks, then FINAL_VAR; the code finds the needle
--- main_config
    thread_pool rlmtest threads=2;
--- config
    location = /t {
        content_by_lua_block {
            local ffi = require "ffi"
            local d = require "llm_driver"

            local function parse(text)
                local res = ffi.new("ngx_http_rlm_response_t")
                ffi.C.ngx_http_rlm_parse_response(text, #text, res)
                local blocks = {}
                for i = 0, tonumber(res.nblocks) - 1 do
                    blocks[#blocks + 1] = ffi.string(res.blocks[i].data,
                                                     res.blocks[i].len)
                end
                local final
                if res.final ~= 0 then
                    final = ffi.string(res.final_value.data,
                                       res.final_value.len)
                end
                return blocks, res.final, final
            end

            -- a haystack of 5000 lines with one needle
            local lines = {}
            for i = 1, 5000 do
                lines[i] = string.format("line %d: the weather report "
                                         .. "says nothing unusual", i)
            end
            lines[3777] = "The secret code for the vault is 7263914."
            local dir = ngx.config.prefix() .. "html/"
            local f = assert(io.open(dir .. "context.txt", "w"))
            f:write(table.concat(lines, "\n"))
            f:close()

            local msgs = {
                { role = "system", content = "You answer with ```repl code." },
                { role = "user", content = "The context is a str of "
                  .. "5000 lines.\nQuery: What is the secret code for "
                  .. "the vault?" },
            }

            local code = {}
            for turn = 1, 4 do
                local res = d.chat("/chat", { messages = msgs })
                local text = d.content(res)
                local blocks, kind, final = parse(text)
                ngx.say("turn ", turn, ": ", res.status, " blocks=",
                        #blocks, " final=", kind, " ",
                        tostring(final))
                for _, b in ipairs(blocks) do
                    code[#code + 1] = b
                end
                msgs[#msgs + 1] = { role = "assistant", content = text }
                msgs[#msgs + 1] = { role = "user", content = "(output)" }
            end

            -- run the blocks in order in one namespace, as the REPL will
            local prog = {
                "import json, urllib.request",
                "context = open(" .. string.format("%q", dir .. "context.txt")
                    .. ").read()",
                "def llm_query(prompt, model=None):",
                "    body = json.dumps({'messages': [{'role': 'user',",
                "                       'content': prompt}]}).encode()",
                "    req = urllib.request.Request('http://127.0.0.1:"
                    .. ngx.var.server_port .. "/chat', data=body)",
                "    with urllib.request.urlopen(req, timeout=10) as r:",
                "        return json.load(r)['choices'][0]['message']"
                    .. "['content']",
                "ns = {'context': context, 'llm_query': llm_query}",
                "blocks = json.loads(open(" .. string.format("%q",
                    dir .. "blocks.json") .. ").read())",
                "for b in blocks:",
                "    exec(b, ns)",
                "print('ANSWER=' + ns['answer_text'])",
            }
            f = assert(io.open(dir .. "blocks.json", "w"))
            f:write(require("cjson").encode(code))
            f:close()
            f = assert(io.open(dir .. "run.py", "w"))
            f:write(table.concat(prog, "\n"), "\n")
            f:close()

            -- a worker thread runs python, the event loop serves its calls
            local ok, out, how = ngx.run_worker_thread("rlmtest",
                "rlm_test_exec", "run",
                "/usr/bin/python3.11 -I " .. dir .. "run.py")
            -- (not its exit status: nginx's SIGCHLD handler may reap the
            -- child before pclose() does)
            ngx.say("python ran: ", tostring(ok))
            ngx.say(tostring(out):match("ANSWER=[^\n]*") or tostring(out))
        }
    }
--- request
GET /t
--- timeout: 30
--- response_body
turn 1: 200 blocks=1 final=0 nil
turn 2: 200 blocks=1 final=0 nil
turn 3: 200 blocks=1 final=0 nil
turn 4: 200 blocks=0 final=2 answer_text
python ran: true
ANSWER=The secret code for the vault is 7263914.



=== TEST 2: as a sub-model it answers from the lines it was given
--- config
    location = /t {
        content_by_lua_block {
            local d = require "llm_driver"
            local demo = require "rlm.demo_model"
            local res = d.chat("/chat", d.user(demo.SUB_PROMPT
                .. "\nQuestion: Which colour is the door?\nLines:\n"
                .. "the window is blue\nthe door is green\nthe roof is red"))
            ngx.say(d.content(res))
        }
    }
--- request
GET /t
--- response_body
the door is green



=== TEST 3: the stand-alone demo upstream (for make run), plain and streamed
--- http_config
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1;
        location = /v1/chat/completions {
            content_by_lua_block { require("rlm.demo_upstream").serve() }
        }
    }
    rlm_provider demo2 url=http://127.0.0.1:$TEST_NGINX_RAND_PORT_1/v1
                 model=rlm-demo retries=0;
--- config
    location = /demo2 { rlm_chat_passthrough demo2; }
    location = /t {
        content_by_lua_block {
            local d = require "llm_driver"
            local body = { messages = { { role = "user",
                content = "Query: where is the key?" } } }
            for _, sse in ipairs({ false, true }) do
                local res = d.chat("/demo2", body, sse)
                local text = d.content(res) or ""
                ngx.say(res.status, " ", text:match("^%[demo model%]") or "?",
                        " repl=", tostring(text:find("```repl\n", 1, true)
                                           ~= nil),
                        " usage=", tostring(res.json.usage
                                            and res.json.usage.total_tokens
                                            > 0))
            end
        }
    }
--- request
GET /t
--- response_body
200 [demo model] repl=true usage=true
200 [demo model] repl=true usage=true
