# Self-test of t/RlmTest.pm defaults, with an explicit plan so that the
# per-block test counts (repeat_each, default no_error_log) are checked.

BEGIN {
    $ENV{TEST_NGINX_PORT} = 19843;
    delete $ENV{TEST_NGINX_SERVER_PORT};
    # never depend on our own module here
    $ENV{TEST_NGINX_LOAD_MODULES} = join ' ',
        map { "/usr/lib/nginx/modules/$_" }
        qw( ndk_http_module.so ngx_http_lua_module.so );
}

use RlmTest;

repeat_each(2);

# status + body + 3 default no_error_log patterns, TEST 3 adds a grep
plan tests => repeat_each() * (blocks() * 5 + 1);

run_tests();

__DATA__

=== TEST 1: lua_package_path points into the repository
--- config
    location = /t {
        content_by_lua_block { ngx.print(package.path) }
    }
--- request
GET /t
--- response_body_like eval
qr{^\Q$RlmTest::Root\E/lua/\?\.lua;\Q$RlmTest::Root\E/t/lib/\?\.lua;}



=== TEST 2: TEST_NGINX_RLM_ROOT is available to configs
--- config
    location = /t { return 200 "root=$TEST_NGINX_RLM_ROOT"; }
--- request
GET /t
--- response_body eval
"root=$RlmTest::Root"



=== TEST 3: each repetition only sees its own log lines
--- config
    location = /t {
        content_by_lua_block {
            ngx.log(ngx.WARN, "rep-line")
            ngx.say("rep")
        }
    }
--- request
GET /t
--- response_body
rep
--- grep_error_log: rep-line
--- grep_error_log_out
rep-line
