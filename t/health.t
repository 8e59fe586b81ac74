# GET /healthz and the module's startup notice.

use RlmTest 'no_plan';

no_shuffle();
run_tests();

__DATA__

=== TEST 1: health answers JSON with the module version
--- config
    location = /healthz {
        rlm_health;
    }
--- request
GET /healthz
--- error_code: 200
--- response_headers
Content-Type: application/json
--- response_body_like: ^\{"status":"ok",.*"module":"ngx_rlm","version":"\d+\.\d+\.\d+"



=== TEST 2: HEAD gets the headers only
--- config
    location = /healthz {
        rlm_health;
    }
--- request
HEAD /healthz
--- error_code: 200
--- response_headers
Content-Type: application/json
--- response_body



=== TEST 3: other methods get 405 in the OpenAI error envelope
--- config
    location = /healthz {
        rlm_health;
    }
--- request
POST /healthz
{}
--- error_code: 405
--- response_body_like: ^\{"error":\{"message":"[^"]+","type":"invalid_request_error","param":null,"code":"method_not_allowed"\}\}$



=== TEST 4: the module announces its version at startup
--- config
    location = /t {
        return 204;
    }
--- request
GET /t
--- error_code: 204
--- log_level: notice
--- error_log eval
qr/\[notice\] .*ngx_rlm\/\d+\.\d+\.\d+ loaded/



=== TEST 5: a location without an rlm directive is not served by the module
--- config
    location = /healthz {
        return 200 "plain\n";
    }
--- request
GET /healthz
--- response_body
plain
