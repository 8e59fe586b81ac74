# Self-test of t/lib/Test/Nginx/Socket.pm: sections that must pass.
# Uses only stock nginx + Debian's lua module (never our own .so).

BEGIN {
    $ENV{TEST_NGINX_PORT} = 19841;
    delete $ENV{TEST_NGINX_SERVER_PORT};
    $ENV{TEST_NGINX_LOAD_MODULES} = join ' ',
        map { "/usr/lib/nginx/modules/$_" }
        qw( ndk_http_module.so ngx_http_lua_module.so );
    $ENV{HARNESS_SELFTEST_VAR} = 'from-env';
}

use Test::Nginx::Socket 'no_plan';

no_shuffle();
run_tests();

__DATA__

=== TEST 1: plain return, exact body and headers
--- config
    location = /t {
        return 200 "hello";
    }
--- request
GET /t
--- response_headers
Content-Length: 5
Content-Type: text/plain
!X-Not-There
--- response_body chomp
hello
--- no_error_log
[error]



=== TEST 2: content_by_lua with the lua module from TEST_NGINX_LOAD_MODULES
--- config
    location = /t {
        content_by_lua_block {
            ngx.say("lua says ", ngx.var.arg_x)
        }
    }
--- request
GET /t?x=42
--- response_body
lua says 42
--- no_error_log
[error]
[alert]



=== TEST 3: chunked response is decoded
--- config
    location = /t {
        content_by_lua_block {
            for i = 1, 3 do
                ngx.print(string.rep(tostring(i), i), "\n")
                ngx.flush(true)
            end
        }
    }
--- request
GET /t
--- response_headers
Transfer-Encoding: chunked
--- raw_response_headers_like: Transfer-Encoding: chunked\r\n
--- response_body
1
22
333



=== TEST 4: pipelined requests, per-request expectations
--- config
    location = /a { return 200 "A"; }
    location = /b { return 201 "B"; }
--- pipelined_requests eval
["GET /a", "GET /nope", "GET /b"]
--- error_code eval
[200, 404, 201]
--- response_body_like eval
["^A\\z", "404 Not Found", "^B\\z"]



=== TEST 5: several requests on separate connections
--- config
    location = /t {
        content_by_lua_block { ngx.say("n=", ngx.var.arg_n) }
    }
--- request eval
["GET /t?n=1", "GET /t?n=2"]
--- response_body eval
["n=1\n", "n=2\n"]



=== TEST 6: more_headers reach nginx
--- config
    location = /t {
        return 200 "foo=$http_x_foo bar=$http_x_bar";
    }
--- more_headers
X-Foo: hello
# comments are skipped
X-Bar: world
--- request
GET /t
--- response_body chomp
foo=hello bar=world



=== TEST 7: request body with Content-Length
--- config
    location = /t {
        content_by_lua_block {
            ngx.req.read_body()
            ngx.print(ngx.req.get_method(), " [", ngx.req.get_body_data(),
                      "] len=", ngx.var.http_content_length)
        }
    }
--- request
POST /t
hello body
--- response_body chomp
POST [hello body] len=10



=== TEST 8: user_files served by the root location
--- config
--- user_files
>>> sub/greeting.txt
static hello
>>> other.txt
second file
--- request
GET /sub/greeting.txt
--- response_body
static hello



=== TEST 9: error_log and grep_error_log_out
--- config
    location = /t {
        content_by_lua_block {
            ngx.log(ngx.WARN, "harness-mark a1")
            ngx.log(ngx.WARN, "harness-mark b2")
            ngx.say("ok")
        }
    }
--- request
GET /t
--- response_body
ok
--- error_log
harness-mark a1
harness-mark b2
--- grep_error_log eval: qr/harness-mark \w\d/
--- grep_error_log_out
harness-mark a1
harness-mark b2



=== TEST 10: $TEST_NGINX_* expansion in configs, $ServerPort in bodies
--- main_config
    env HARNESS_SELFTEST_VAR;
--- http_config
    map $uri $harness_port {
        default "port-$TEST_NGINX_SERVER_PORT";
    }
--- config
    location = /t {
        content_by_lua_block {
            ngx.print(ngx.var.harness_port, " ",
                      os.getenv("HARNESS_SELFTEST_VAR"))
        }
    }
--- request
GET /t
--- response_body chomp
port-$ServerPort from-env



=== TEST 11: init runs Perl before the request
--- config
--- init
open my $out, '>', html_dir() . '/made-by-init.txt' or die $!;
print $out "init was here\n";
close $out;
--- request
GET /made-by-init.txt
--- response_body
init was here



=== TEST 12: raw_request is sent byte for byte
--- config
    location = /t { return 200 "proto=$server_protocol"; }
--- raw_request eval
"GET /t HTTP/1.0\r\nHost: localhost\r\n\r\n"
--- response_body chomp
proto=HTTP/1.0



=== TEST 13: error_code and the error page body
--- config
    location = /t { return 403; }
--- request
GET /t
--- error_code: 403
--- response_body_like: 403 Forbidden
--- response_body_unlike: never-there



=== TEST 14: log-phase lines are seen after wait
--- config
    location = /t {
        return 200 "x";
        log_by_lua_block { ngx.log(ngx.WARN, "log phase ran for ", ngx.var.uri) }
    }
--- request
GET /t
--- wait: 0.05
--- error_log
log phase ran for /t



=== TEST 15: abort: client gives up after the timeout without failing
--- config
    location = /t {
        content_by_lua_block { ngx.sleep(2) ngx.say("late") }
    }
--- request
GET /t
--- timeout: 0.3
--- abort
--- ignore_response
--- no_error_log
[alert]



=== TEST 16: shutdown_error_log sees what nginx logs while exiting
--- http_config
    exit_worker_by_lua_block { ngx.log(ngx.WARN, "harness worker exiting") }
--- config
    location = /t { return 200 "y"; }
--- request
GET /t
--- response_body chomp
y
--- shutdown_error_log
harness worker exiting



=== TEST 17: log_level per block
--- log_level: warn
--- config
    location = /t {
        content_by_lua_block {
            ngx.log(ngx.INFO, "harness info line")
            ngx.log(ngx.WARN, "harness warn line")
            ngx.say("z")
        }
    }
--- request
GET /t
--- response_body
z
--- error_log
harness warn line
--- no_error_log
harness info line
[debug]



=== TEST 18: request body split over two packets with a delay
--- config
    location = /t {
        content_by_lua_block {
            ngx.req.read_body()
            ngx.print(ngx.req.get_body_data())
        }
    }
--- request eval
[["POST /t\nhel", {value => "lo", delay_before => 0.05}]]
--- response_body chomp
hello
