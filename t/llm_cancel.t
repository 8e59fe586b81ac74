# Mass cancellation of model calls: hundreds of calls in flight on one
# worker end at once, because the client of the request that made them
# went away or because their deadline passed.  libcurl closes every
# socket; nginx must stop watching each one before it is closed (an
# epoll_ctl() on a closed descriptor fails with EBADF: an [alert] per
# socket), and every nginx connection must be given back.
#
# Three upstreams:
#   "hole"  a listening socket of the test process with a backlog of one
#           that never accepts: connects to it stay pending, so calls to
#           it are cancelled while they connect;
#   "mute"  the same with a long backlog: connects complete in the
#           kernel, the request is sent and no answer ever comes;
#   "mock"  the scripted upstream served by the same nginx.
# The first two hold no nginx connection of their own, so counting the
# worker's connections finds exactly those the calls leave behind.

use IO::Socket::INET;
use RlmTest 'no_plan';

our ($Hole, $Mute);

sub listener {
    my $backlog = shift;

    my $s = IO::Socket::INET->new(Listen => $backlog,
                                  LocalAddr => '127.0.0.1', LocalPort => 0,
                                  Proto => 'tcp')
        or die "cannot listen: $!\n";

    return $s;
}

add_block_preprocessor(sub {
    my $block = shift;

    # fresh ones for each block: connections left queued by the previous
    # block go with the old sockets
    $Hole = listener(1);
    $Mute = listener(1024);
    $ENV{TEST_NGINX_HOLE_PORT} = $Hole->sockport;
    $ENV{TEST_NGINX_MUTE_PORT} = $Mute->sockport;

    my $http = $block->http_config // '';
    $block->set_value('http_config', <<'_EOC_' . $http);
    lua_shared_dict mock_llm 8m;
    rlm_provider mock url=http://127.0.0.1:$TEST_NGINX_SERVER_PORT/v1
                 model=mock-model retries=0 timeout=60s
                 max_concurrent=1000;
    rlm_provider hole url=http://127.0.0.1:$TEST_NGINX_HOLE_PORT/v1
                 model=mock-model retries=0 timeout=60s
                 connect_timeout=60s max_concurrent=1000;
    rlm_provider mute url=http://127.0.0.1:$TEST_NGINX_MUTE_PORT/v1
                 model=mock-model retries=0 timeout=60s
                 max_concurrent=1000;

    init_by_lua_block {
        -- helpers of the /t drivers: require("llm_cancel")
        local ffi = require "ffi"
        local d = require "llm_driver"

        ffi.cdef[[
            typedef struct __dirstream DIR;
            DIR *opendir(const char *name);
            void *readdir(DIR *dir);
            int closedir(DIR *dir);
        ]]

        local _M = {}

        -- descriptors open in this worker
        local function fds()
            local dir = ffi.C.opendir("/proc/self/fd")
            local n = 0
            while ffi.C.readdir(dir) ~= nil do
                n = n + 1
            end
            ffi.C.closedir(dir)
            return n
        end

        -- polls until f() is true; the bound only keeps a broken run short
        local function wait_for(f)
            for _ = 1, 1000 do
                if f() then
                    return true
                end
                ngx.sleep(0.01)
            end
            return false
        end

        local function mock_inflight()
            return ngx.shared.mock_llm:get("inflight") or 0
        end

        -- what is in use before the calls: descriptors, nginx connections
        function _M.base()
            return { fds = fds(), connections = d.status().connections }
        end

        -- "GET uri" on a connection of its own; hangs up once n calls are
        -- in flight (and, for the mock, once its n handlers wait, so that
        -- each one sees its caller go)
        function _M.abort_many(uri, n, mock)
            local sock = ngx.socket.tcp()
            assert(sock:connect("127.0.0.1", ngx.var.server_port))
            assert(sock:send("GET " .. uri .. " HTTP/1.1\r\nHost: x\r\n\r\n"))
            local st
            wait_for(function()
                st = d.status().curl
                return st.active >= n
                       and (not mock or mock_inflight() >= mock)
            end)
            ngx.say("in flight: ", st.active)
            sock:close()
        end

        -- what is left once the calls are gone, and a call that works
        function _M.report(base)
            local st
            wait_for(function()
                st = d.status().curl
                return st.active == 0
            end)
            ngx.say("after: active=", st.active, " sockets=", st.sockets,
                    " connections=", st.connections, " cancelled=",
                    st.cancelled, " completed=", st.completed)
            ngx.say("nginx connections back: ", wait_for(function()
                return d.status().connections <= base.connections
            end))
            ngx.say("descriptors back: ", wait_for(function()
                return fds() <= base.fds
            end))
            local res = d.chat("/mock", d.user("still here"))
            ngx.say("next call: ", res.status, " ", d.content(res))
        end

        package.loaded.llm_cancel = _M
    }
_EOC_

    my $config = $block->config // '';
    $block->set_value('config', <<'_EOC_' . $config);
    location = /v1/chat/completions {
        # the mock stops waiting when its caller hangs up
        lua_check_client_abort on;
        content_by_lua_block { require("mock_llm").serve() }
    }
    location = /mock { rlm_chat_passthrough mock; }
    location = /hole { rlm_chat_passthrough hole; }
    location = /mute { rlm_chat_passthrough mute; }
    location = /status { rlm_llm_status; }

    # n calls at once to ?uri, each answered after ?latency seconds (by
    # the mock), all with a deadline of ?deadline ms if given
    location = /many {
        lua_check_client_abort on;
        content_by_lua_block {
            local cjson = require "cjson.safe"
            local n = tonumber(ngx.var.arg_n)
            if ngx.var.arg_deadline then
                -- subrequests inherit it
                ngx.req.set_header("X-RLM-Deadline", ngx.var.arg_deadline)
            end
            local reqs = {}
            for i = 1, n do
                reqs[i] = { ngx.var.arg_uri, { method = ngx.HTTP_POST,
                    body = cjson.encode({
                        messages = { { role = "user", content = "q" .. i } },
                        mock = { latency = tonumber(ngx.var.arg_latency) }
                    }) } }
            end
            local res = { ngx.location.capture_multi(reqs) }
            local ok, failed = 0, 0
            for _, r in ipairs(res) do
                if r.status == 200 then
                    ok = ok + 1
                else
                    failed = failed + 1
                end
            end
            ngx.say("ok=", ok, " failed=", failed)
        }
    }
_EOC_

    my $main = $block->main_config // '';
    $block->set_value('main_config', "    worker_rlimit_nofile 8192;\n"
                                     . $main);
});

no_shuffle();
no_long_string();
worker_connections(4096);
run_tests();

__DATA__

=== TEST 1: a client aborts a request with 300 calls connecting: no alert, all freed
--- config
    location = /t {
        content_by_lua_block {
            local c = require "llm_cancel"
            local base = c.base()
            c.abort_many("/many?n=300&uri=/hole", 300)
            c.report(base)
        }
    }
--- request
GET /t
--- timeout: 60
--- response_body
in flight: 300
after: active=0 sockets=0 connections=0 cancelled=300 completed=0
nginx connections back: true
descriptors back: true
next call: 200 echo: still here
--- error_log
client prematurely closed connection
--- no_error_log
[alert]
[crit]
[error]
epoll_ctl



=== TEST 2: a client aborts a request with 300 calls waiting for answers
--- config
    location = /t {
        content_by_lua_block {
            local c = require "llm_cancel"
            local base = c.base()
            c.abort_many("/many?n=300&uri=/mute", 300)
            c.report(base)
        }
    }
--- request
GET /t
--- timeout: 60
--- response_body
in flight: 300
after: active=0 sockets=0 connections=0 cancelled=300 completed=0
nginx connections back: true
descriptors back: true
next call: 200 echo: still here
--- error_log
client prematurely closed connection
--- no_error_log
[alert]
[crit]
[error]
epoll_ctl



=== TEST 3: 300 calls connecting reach their deadline together
--- config
    location = /t {
        content_by_lua_block {
            local c = require "llm_cancel"
            local base = c.base()
            local res = ngx.location.capture(
                            "/many?n=300&deadline=1000&uri=/hole")
            ngx.print(res.body)
            c.report(base)
        }
    }
--- request
GET /t
--- timeout: 60
--- response_body
ok=0 failed=300
after: active=0 sockets=0 connections=0 cancelled=0 completed=300
nginx connections back: true
descriptors back: true
next call: 200 echo: still here
--- error_log
no complete answer within the timeout
--- no_error_log
[alert]
[crit]
epoll_ctl



=== TEST 4: 300 calls waiting for answers reach their deadline together
--- config
    location = /t {
        content_by_lua_block {
            local c = require "llm_cancel"
            local base = c.base()
            local res = ngx.location.capture(
                            "/many?n=300&deadline=1000&uri=/mute")
            ngx.print(res.body)
            c.report(base)
        }
    }
--- request
GET /t
--- timeout: 60
--- response_body
ok=0 failed=300
after: active=0 sockets=0 connections=0 cancelled=0 completed=300
nginx connections back: true
descriptors back: true
next call: 200 echo: still here
--- error_log
no complete answer within the timeout
--- no_error_log
[alert]
[crit]
epoll_ctl



=== TEST 5: keep-alive: 100 finished calls leave 100 idle sockets; 300 calls reuse them and are aborted; a clean exit
--- config
    location = /t {
        content_by_lua_block {
            local c = require "llm_cancel"
            local d = require "llm_driver"
            local base = c.base()
            local res = ngx.location.capture("/many?n=100&uri=/mock")
            ngx.print(res.body)
            local st = d.status().curl
            ngx.say("idle: sockets=", st.sockets, " connections=",
                    st.connections)
            c.abort_many("/many?n=300&latency=30&uri=/mock", 300, 300)
            c.report(base)
            st = d.status().curl
            ngx.say("kept for the next call: connections=", st.connections)
        }
    }
--- request
GET /t
--- timeout: 60
--- response_body
ok=100 failed=0
idle: sockets=0 connections=100
in flight: 300
after: active=0 sockets=0 connections=0 cancelled=300 completed=100
nginx connections back: true
descriptors back: true
next call: 200 echo: still here
kept for the next call: connections=1
--- error_log
client prematurely closed connection
--- no_error_log
[alert]
[crit]
[error]
epoll_ctl
--- no_shutdown_error_log
[alert]
open socket
epoll_ctl
