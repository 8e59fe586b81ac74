# Self-test of t/lib/Test/Nginx/Socket.pm: process and config knobs.

BEGIN {
    $ENV{TEST_NGINX_PORT} = 19846;
    delete $ENV{TEST_NGINX_SERVER_PORT};
    $ENV{TEST_NGINX_LOAD_MODULES} = join ' ',
        map { "/usr/lib/nginx/modules/$_" }
        qw( ndk_http_module.so ngx_http_lua_module.so );
    $ENV{HARNESS_PASSED_VAR} = 'passed-through';
}

use Test::Nginx::Socket::Lua;

master_on();
workers(2);
env_to_nginx('HARNESS_PASSED_VAR');
no_root_location();
no_shuffle();

plan tests => 11;

run_tests();

__DATA__

=== TEST 1: master_on + workers(2) + env_to_nginx + no_root_location
--- config
    location / {
        content_by_lua_block {
            ngx.say(ngx.worker.count(), " ", ngx.config.subsystem, " ",
                    os.getenv("HARNESS_PASSED_VAR"))
        }
    }
--- request
GET /anything
--- response_body
2 http passed-through
--- no_error_log
[error]



=== TEST 2: a block without --- config reuses the running nginx
--- request
GET /again
--- response_body
2 http passed-through



=== TEST 3: must_die: nginx refusing the config is the expected outcome
--- config
    location = /t { not_a_directive; }
--- must_die
--- error_log
[emerg]
unknown directive "not_a_directive"



=== TEST 4: HEAD request has no body to read
--- config
    location = /t { return 200 "body"; }
--- request
HEAD /t
--- response_headers
Content-Length: 4
--- response_body chomp
