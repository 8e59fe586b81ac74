# Directives of the sessions API: good values load; bad values and bad
# places fail nginx -t with a message that names the directive.  Also
# the API's behaviour when no manager is configured, and with
# master_process off (the harness default).

use RlmTest 'no_plan';

no_shuffle();
run_tests();

__DATA__

=== TEST 1: every sessions directive with a good value loads
--- http_config
    rlm_sessions_zone rlm_test 1m;
    rlm_context_max_size 100m;
    rlm_session_owner $http_x_tenant;
--- config
    location /v1/sessions { rlm_sessions_api; }
    location = /metrics { rlm_metrics; }
--- request
GET /metrics
--- response_body_like chomp
^# HELP rlm_manager_up



=== TEST 2: rlm_sessions_zone needs a size nginx can parse
--- http_config
    rlm_sessions_zone rlm_test lots;
--- config
--- must_die
--- error_log
invalid zone size "lots"



=== TEST 3: rlm_sessions_zone is at least 64k
--- http_config
    rlm_sessions_zone rlm_test 8k;
--- config
--- must_die
--- error_log
zone "rlm_test" is too small: at least 64k



=== TEST 4: rlm_sessions_zone only once
--- http_config
    rlm_sessions_zone a 1m;
    rlm_sessions_zone b 1m;
--- config
--- must_die
--- error_log
"rlm_sessions_zone" directive is duplicate



=== TEST 5: rlm_sessions_zone takes a name and a size
--- http_config
    rlm_sessions_zone 1m;
--- config
--- must_die
--- error_log
invalid number of arguments in "rlm_sessions_zone" directive



=== TEST 6: rlm_context_max_size is not 0
--- http_config
    rlm_context_max_size 0;
--- config
--- must_die
--- error_log
"rlm_context_max_size" must be between 1 and 4095m



=== TEST 7: rlm_context_max_size fits the protocol's 32-bit blob length
--- http_config
    rlm_context_max_size 4096m;
--- config
--- must_die
--- error_log
"rlm_context_max_size" must be between 1 and 4095m



=== TEST 8: rlm_session_idle_timeout is at least 1s
--- http_config
    rlm_session_idle_timeout 0;
--- config
--- must_die
--- error_log
"rlm_session_idle_timeout" must be at least 1s



=== TEST 9: rlm_sessions_api is a location directive
--- http_config
    rlm_sessions_api;
--- config
--- must_die
--- error_log
"rlm_sessions_api" directive is not allowed here



=== TEST 10: two handlers in one location conflict
--- config
    location /x { rlm_sessions_api; rlm_metrics; }
--- must_die
--- error_log
"rlm_metrics" directive conflicts with another rlm handler



=== TEST 11: the runtime dir must leave room for socket names
--- http_config
    rlm_sandboxd /usr/bin/true;
    rlm_runtime_dir /tmp/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa;
--- config
--- must_die
--- error_log
is too long for a unix socket



=== TEST 12: rlm_sandboxd_socket must be absolute
--- http_config
    rlm_sandboxd_socket run/control.sock;
--- config
--- must_die
--- error_log
"rlm_sandboxd_socket" directive must be an absolute path



=== TEST 13: without a manager, creating a session is 503 with Retry-After
--- config
    location /v1/sessions { rlm_sessions_api; }
--- request
POST /v1/sessions
--- error_code: 503
--- response_headers
Retry-After: 1
Content-Type: application/json
--- response_body_like chomp
^\{"error":\{"message":"no sandbox manager is configured[^"]*","type":"server_error","param":null,"code":"manager_unavailable"\}\}$



=== TEST 14: without a manager, health says so and is 200
--- config
    location = /healthz { rlm_health; }
--- request
GET /healthz
--- response_body_like chomp
"manager":"not_configured"



=== TEST 15: an external socket nobody listens on: health is 503
--- http_config
    rlm_sandboxd_socket /nonexistent/control.sock;
--- config
    location = /healthz { rlm_health; }
--- request
GET /healthz
--- error_code: 503
--- response_body_like chomp
^\{"status":"degraded",.*"manager":"unreachable"\}$



=== TEST 16: an external socket nobody listens on: create is 503
--- http_config
    rlm_sandboxd_socket /nonexistent/control.sock;
--- config
    location /v1/sessions { rlm_sessions_api; }
--- request
POST /v1/sessions
--- error_code: 503
--- response_body_like chomp
"code":"manager_unavailable"
--- error_log
the sandbox manager is not reachable on "/nonexistent/control.sock"



=== TEST 17: routes anchor on the last /sessions segment
--- config
    location /api/ { rlm_sessions_api; }
--- request eval
[
 "GET /api/x/sessions/0123456789abcdef0123456789abcdef",
 "GET /api/x/sessions/0123456789ABCDEF0123456789ABCDEF",
 "GET /api/x/sessionsfoo",
 "GET /api/x/sessions/0123456789abcdef0123456789abcdef/nope",
 "GET /api/x/sessions",
]
--- error_code eval
[404, 400, 404, 404, 200]
--- response_body_like eval
[
 '"code":"session_not_found"',
 '"code":"invalid_session_id"',
 '"code":"not_found"',
 '"code":"not_found"',
 '^\{"object":"list","data":\[\]\}$',
]



=== TEST 18: wrong methods get 405 with Allow
--- config
    location /v1/sessions { rlm_sessions_api; }
--- request eval
[
 "PUT /v1/sessions",
 "GET /v1/sessions/0123456789abcdef0123456789abcdef/eval",
 "DELETE /v1/sessions/0123456789abcdef0123456789abcdef/context",
 "POST /v1/sessions/0123456789abcdef0123456789abcdef",
]
--- error_code eval
[405, 405, 405, 405]
--- response_headers eval
[
 "Allow: GET, HEAD, POST",
 "Allow: POST",
 "Allow: PUT, POST",
 "Allow: GET, HEAD, DELETE",
]



=== TEST 19: metrics are Prometheus text with every cell status
--- config
    location = /metrics { rlm_metrics; }
--- request
GET /metrics
--- response_headers
Content-Type: text/plain; version=0.0.4; charset=utf-8
--- response_body_like eval
qr/rlm_cells_total\{status="ok"\} 0\n(?:.*\n)*rlm_cells_total\{status="sandbox_lost"\} 0\n(?:.*\n)*rlm_cell_duration_seconds_bucket\{le="\+Inf"\} 0\n/



=== TEST 20: metrics refuse POST
--- config
    location = /metrics { rlm_metrics; }
--- request
POST /metrics
--- error_code: 405
--- response_body_like chomp
"code":"method_not_allowed"



=== TEST 21: rlm_sandbox_allow_missing takes the jail's layer names
--- http_config
    rlm_sandbox_allow_missing cgroups root;
--- config
    location = /metrics { rlm_metrics; }
--- request
GET /metrics
--- response_body_like chomp
^# HELP rlm_manager_up



=== TEST 22: rlm_sandbox_allow_missing refuses any other name
--- http_config
    rlm_sandbox_allow_missing mounts;
--- config
--- must_die
--- error_log
invalid value "mounts"
