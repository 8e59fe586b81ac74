# The rlm_provider and rlm_chat_passthrough directives: what nginx -t
# accepts and what it refuses, with messages that say why.

use RlmTest 'no_plan';

$ENV{RLM_TEST_KEY} = 'sk-test-config-key';
delete $ENV{RLM_UNSET_KEY};

run_tests();

__DATA__

=== TEST 1: a full provider line is accepted, key from a file
--- user_files
>>> provider.key
   sk-from-file-123
--- http_config
    rlm_provider p url=https://api.example.com/v1/ key_file=../html/provider.key
                 model=gpt-x timeout=30s connect_timeout=2s retries=4
                 backoff=200ms backoff_max=5s retry_after_max=30s
                 max_concurrent=16 max_response=4m;
--- config
    location = /s { rlm_llm_status; }
--- request
GET /s
--- response_body_like chomp
"providers":\[\{"name":"p","active":0,"waiting":0\}\]



=== TEST 2: url is required
--- http_config
    rlm_provider p model=m;
--- config
--- must_die
--- error_log
"rlm_provider" directive needs url=



=== TEST 3: only http and https
--- http_config
    rlm_provider p url=ftp://example.com/v1;
--- config
--- must_die
--- error_log
url must start with http:// or https://



=== TEST 4: key_env naming an unset variable
--- main_config
    env RLM_UNSET_KEY;
--- http_config
    rlm_provider p url=http://127.0.0.1/v1 key_env=RLM_UNSET_KEY;
--- config
--- must_die
--- error_log
environment variable "RLM_UNSET_KEY" is not set or empty



=== TEST 5: key_env and key_file together
--- main_config
    env RLM_TEST_KEY;
--- http_config
    rlm_provider p url=http://127.0.0.1/v1 key_env=RLM_TEST_KEY
                 key_file=/nonexistent;
--- config
--- must_die
--- error_log
takes one of key_env and key_file



=== TEST 6: a key file with a line break inside the key
--- user_files
>>> bad.key
sk-part-one
sk-part-two
--- http_config
    rlm_provider p url=http://127.0.0.1/v1 key_file=../html/bad.key;
--- config
--- must_die
--- error_log
the key contains white space or control characters



=== TEST 7: a missing key file
--- http_config
    rlm_provider p url=http://127.0.0.1/v1 key_file=/nonexistent/key;
--- config
--- must_die
--- error_log
"/nonexistent/key" failed



=== TEST 8: unknown and invalid parameters
--- http_config
    rlm_provider p url=http://127.0.0.1/v1 retries=many;
--- config
--- must_die
--- error_log
rlm_provider "p": invalid parameter "retries=many"



=== TEST 9: a zero timeout
--- http_config
    rlm_provider p url=http://127.0.0.1/v1 timeout=0;
--- config
--- must_die
--- error_log
rlm_provider "p": invalid parameter "timeout=0"



=== TEST 10: duplicate provider names
--- http_config
    rlm_provider p url=http://127.0.0.1/v1;
    rlm_provider p url=http://127.0.0.2/v1;
--- config
--- must_die
--- error_log
"rlm_provider" directive is duplicate



=== TEST 11: rlm_chat_passthrough naming an unknown provider
--- http_config
    rlm_provider p url=http://127.0.0.1/v1;
--- config
    location = /c { rlm_chat_passthrough nope; }
--- must_die
--- error_log
unknown rlm_provider "nope"



=== TEST 12: rlm_chat_passthrough without any provider
--- config
    location = /c { rlm_chat_passthrough; }
--- must_die
--- error_log
"rlm_chat_passthrough" needs an "rlm_provider"



=== TEST 13: rlm_provider is an http-level directive
--- config
    location = /c { rlm_provider p url=http://127.0.0.1/v1; }
--- must_die
--- error_log
"rlm_provider" directive is not allowed here



=== TEST 14: a provider declared after the location that uses it
--- config
    location = /c { rlm_chat_passthrough late; }
--- http_config
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1;
        location = /c2 { rlm_chat_passthrough late; }
    }
    rlm_provider late url=http://127.0.0.1:1/v1 model=m;
--- request
GET /c
--- error_code: 405
--- response_body_like chomp
"code":"method_not_allowed"



=== TEST 15: key_env without nginx's env directive
--- http_config
    rlm_provider p url=http://127.0.0.1/v1 key_env=RLM_TEST_KEY;
--- config
--- must_die
--- error_log
rlm_provider "p": key_env=RLM_TEST_KEY needs "env RLM_TEST_KEY;" in the main context, before the http block



=== TEST 16: key_env with "env NAME=VALUE;" loads
--- main_config
    env RLM_INLINE_KEY=sk-inline-value;
--- http_config
    rlm_provider p url=http://127.0.0.1/v1 key_env=RLM_INLINE_KEY;
--- config
    location = /s { rlm_llm_status; }
--- request
GET /s
--- response_body_like chomp
"providers":\[\{"name":"p"



=== TEST 17: a host with a space in it
--- http_config
    rlm_provider p "url=http://bad host/v1";
--- config
--- must_die
--- error_log
rlm_provider "p": invalid url "http://bad host/v1": Bad hostname



=== TEST 18: a port over 65535
--- http_config
    rlm_provider p url=http://127.0.0.1:99999/v1;
--- config
--- must_die
--- error_log
rlm_provider "p": invalid url "http://127.0.0.1:99999/v1": Port number was not a decimal number between 0 and 65535



=== TEST 19: an IPv6 address without its closing bracket
--- http_config
    rlm_provider p url=https://[::1/v1;
--- config
--- must_die
--- error_log eval
qr/rlm_provider "p": invalid url "https:\/\/\[::1\/v1": /



=== TEST 20: max_response takes g, as client_max_body_size does
--- http_config
    rlm_provider p url=http://127.0.0.1/v1 max_response=1g;
--- config
    location = /s { rlm_llm_status; }
--- request
GET /s
--- response_body_like chomp
"providers":\[\{"name":"p"
