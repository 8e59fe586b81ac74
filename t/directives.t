# Directive parsing: good values load, bad values fail `nginx -t` with a
# message that names the directive and the problem.

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(dirname);
use File::Temp qw(tempdir);
use Test::More;

my $top = abs_path(dirname(__FILE__) . '/..');
my $nginx = $ENV{TEST_NGINX_BINARY} || '/usr/sbin/nginx';
my $build = $ENV{RLM_BUILD} || "$top/build";
my $module = "$build/ngx_http_rlm_module.so";

plan skip_all => "module not built ($module)" unless -f $module;

my $dir = tempdir('rlm-directives-XXXXXX', TMPDIR => 1, CLEANUP => 1);
mkdir "$dir/logs";

sub nginx_t {
    my ($http, $location, $main) = @_;
    $location //= '';
    $main //= '';

    open my $fh, '>', "$dir/nginx.conf" or die $!;
    print $fh <<"CONF";
load_module $module;
error_log stderr;$main
pid $dir/nginx.pid;
events {}
http {
    $http
    server {
        listen 127.0.0.1:19802;
        location / { $location }
    }
}
CONF
    close $fh;

    my $out = `$nginx -t -p $dir -c $dir/nginx.conf 2>&1`;
    return ($? == 0, $out);
}

# "in FILE:LINE" of the first line of the last nginx.conf written that
# holds this text: where nginx -t must say the error is
sub at {
    my ($text) = @_;
    open my $fh, '<', "$dir/nginx.conf" or die $!;
    while (my $l = <$fh>) {
        return qr/ in \Q$dir\E\/nginx\.conf:$.$/m if index($l, $text) >= 0;
    }
    die "\"$text\" is not in nginx.conf\n";
}

# a file rlm_sandboxd may not run
open my $nx, '>', "$dir/not-executable" or die $!;
print $nx "#!/bin/sh\n";
close $nx;
chmod 0644, "$dir/not-executable";

my ($ok, $out) = nginx_t(<<'HTTP', 'rlm_health;');
    rlm_sandboxd /usr/bin/true;
    rlm_runtime_dir /run/rlm-test;
    rlm_pool_size 16;
    rlm_max_sessions 100;
    rlm_cell_cpu_time 5s;
    rlm_cell_timeout 2500ms;
    rlm_sandbox_memory 1g;
    rlm_context_max_size 2g;
    rlm_answer_max 16m;
    rlm_sandbox_pids 32;
    rlm_output_max 64k;
    rlm_session_idle_timeout 10m;
    rlm_session_queue 4;
HTTP
ok($ok, 'every directive with a good value loads') or diag($out);

my @bad = (
    [ 'rlm_pool_size 5000;',
      qr/"rlm_pool_size" directive must be between 0 and 4096/ ],
    [ 'rlm_pool_size lots;',
      qr/"rlm_pool_size" directive invalid number/ ],
    [ 'rlm_max_sessions 0;',
      qr/"rlm_max_sessions" directive must be between 1 and/ ],
    [ 'rlm_sandbox_pids 0;',
      qr/"rlm_sandbox_pids" directive must be between 1 and 65536/ ],
    [ 'rlm_session_queue 100000;',
      qr/"rlm_session_queue" directive must be between 1 and 65536/ ],
    [ 'rlm_sandboxd bin/rlm-sandboxd;',
      qr/"rlm_sandboxd" directive must be an absolute path/ ],
    [ 'rlm_runtime_dir "";',
      qr/"rlm_runtime_dir" directive must not be empty/ ],
    [ 'rlm_cell_timeout 5ms;',
      qr/"rlm_cell_timeout" must be at least 10ms/ ],
    [ 'rlm_cell_timeout soon;',
      qr/"rlm_cell_timeout" directive invalid value/ ],
    [ 'rlm_cell_cpu_time 0;',
      qr/"rlm_cell_cpu_time" must be at least 1s/ ],
    [ 'rlm_sandbox_memory 1m;',
      qr/"rlm_sandbox_memory" must be at least 16m/ ],
    [ 'rlm_output_max 10;',
      qr/"rlm_output_max" must be at least 1k/ ],
    [ "rlm_sandboxd /usr/bin/true;\n    rlm_sandboxd_socket /run/x.sock;",
      qr/mutually exclusive/, 'rlm_sandboxd_socket' ],
    [ "rlm_sandboxd_socket /run/x.sock;\n    rlm_sandboxd /usr/bin/true;",
      qr/mutually exclusive/, 'rlm_sandboxd /' ],
    [ 'rlm_sandboxd /nonexistent/rlm-sandboxd;',
      qr/rlm_sandboxd "\/nonexistent\/rlm-sandboxd": stat\(\) failed \(2: No such file/ ],
    [ "rlm_sandboxd $dir/not-executable;",
      qr/rlm_sandboxd "\Q$dir\E\/not-executable" is not executable/ ],
    [ "rlm_sandboxd $dir;",
      qr/rlm_sandboxd "\Q$dir\E" is not a regular file/ ],
    [ 'rlm_context_max_size 4g;',
      qr/"rlm_context_max_size" must be between 1 and 4095m/ ],
    [ 'rlm_answer_max 1g;',
      qr/"rlm_answer_max" must be from 1k to 16m/ ],
    [ 'rlm_state_max 100;',
      qr/"rlm_state_max" must be from 1k to 16m/ ],
    [ 'rlm_sandbox_memory 1t;',
      qr/"rlm_sandbox_memory" directive invalid value/ ],
    [ 'rlm_session_idle_timeout 0;',
      qr/"rlm_session_idle_timeout" must be at least 1s/ ],
    [ "rlm_sandboxd /usr/bin/true;\n    rlm_runtime_dir /tmp/" . ('a' x 120) . ';',
      qr/the control socket path "\/tmp\/a+\/control.sock" is too long/,
      'rlm_runtime_dir' ],
    [ 'rlm_pool_size 4 5;',
      qr/invalid number of arguments in "rlm_pool_size" directive/ ],
);

# every message names the file and line of the directive at fault (the
# third element: the text of that line; else the first line of the case)
for my $case (@bad) {
    my ($http, $want, $line) = @$case;
    my ($good, $text) = nginx_t($http);
    ok(!$good, "rejected: $http");
    like($text, $want, "message for: $http");
    $line //= (split /\n/, $http)[0];
    like($text, at($line), "file:line for: $http");
}

# location-only and main-only directives stay where they belong
($ok, $out) = nginx_t('rlm_health;');
ok(!$ok, 'rlm_health outside a location is rejected');
like($out, qr/"rlm_health" directive is not allowed here/,
     'rlm_health placement message');

($ok, $out) = nginx_t('', 'rlm_pool_size 4;');
ok(!$ok, 'rlm_pool_size inside a location is rejected');
like($out, qr/"rlm_pool_size" directive is not allowed here/,
     'rlm_pool_size placement message');

($ok, $out) = nginx_t('', 'rlm_health; rlm_health;');
ok(!$ok, 'a second rlm handler in one location is rejected');
like($out, qr/conflicts with another rlm handler/, 'conflict message');

# the completion endpoint (ngx_http_rlm_chat_module)
my $provider = 'rlm_provider p url=http://127.0.0.1:9/v1 model=m;';

($ok, $out) = nginx_t($provider . "\n    rlm_max_iterations 10;\n"
                      . "    rlm_max_depth 2;\n"
                      . "    rlm_completion_timeout 2m;\n"
                      . "    rlm_max_error_cells 3;\n"
                      . "    rlm_block_output_max 8k;\n"
                      . "    rlm_max_concurrent_calls 16;\n"
                      . "    rlm_final_markers off;",
                      'rlm_completions; rlm_completion_model $arg_m;');
ok($ok, 'the completion directives load') or diag($out);

($ok, $out) = nginx_t($provider . "\n    rlm_block_output_max 1g;",
                      'rlm_completions;');
ok(!$ok, 'rlm_block_output_max takes g, and checks its bound');
like($out, qr/"rlm_block_output_max" directive must be between 100 and/,
     'rlm_block_output_max 1g message');

for my $case (
    [ 'rlm_max_iterations 0;',
      qr/"rlm_max_iterations" directive must be between 1 and 1000/ ],
    [ 'rlm_max_depth 9;',
      qr/"rlm_max_depth" directive must be between 0 and 8/ ],
    [ 'rlm_block_output_max 10;',
      qr/"rlm_block_output_max" directive must be between 100 and/ ],
    [ 'rlm_max_concurrent_calls 0;',
      qr/"rlm_max_concurrent_calls" directive must be between 1 and/ ],
    [ 'rlm_final_markers maybe;',
      qr/invalid value "maybe" in "rlm_final_markers" directive/ ],
    [ 'rlm_system_prompt_file /nonexistent/prompt.txt;',
      qr/open\(\) "\/nonexistent\/prompt.txt" failed/ ],
)
{
    my ($http, $want) = @$case;
    my ($good, $text) = nginx_t($provider . "\n    " . $http);
    ok(!$good, "rejected: $http");
    like($text, $want, "message for: $http");
}

($ok, $out) = nginx_t('', 'rlm_completions;');
ok(!$ok, 'rlm_completions without a provider is rejected');
like($out, qr/"rlm_completions" needs an "rlm_provider"/,
     'rlm_completions provider message');
# found at the end of the http block, reported at the directive
like($out, at('rlm_completions;'), 'rlm_completions provider file:line');

($ok, $out) = nginx_t($provider, 'rlm_chat_passthrough nope;');
ok(!$ok, 'rlm_chat_passthrough naming no provider is rejected');
like($out, qr/unknown rlm_provider "nope"/, 'unknown provider message');
like($out, at('rlm_chat_passthrough nope;'), 'unknown provider file:line');

($ok, $out) = nginx_t('', 'rlm_chat_passthrough;');
ok(!$ok, 'rlm_chat_passthrough without a provider is rejected');
like($out, at('rlm_chat_passthrough;'), 'no provider file:line');

# provider URLs go through libcurl's URL parser
for my $case (
    [ '"url=http://bad host/v1"', qr/Bad hostname/ ],
    [ 'url=http://127.0.0.1:99999/v1', qr/Port number was not a decimal number between 0 and 65535/ ],
    [ 'url=https://[::1/v1', qr/Bad IPv6 address|Bad hostname|Malformed input/ ],
)
{
    my ($url, $want) = @$case;
    my $http = "rlm_provider p $url model=m;";
    my ($good, $text) = nginx_t($http);
    ok(!$good, "rejected: $url");
    like($text, qr/rlm_provider "p": invalid url "[^"]*": /,
         "invalid url message: $url");
    like($text, $want, "curl's reason: $url");
    like($text, at($http), "file:line: $url");
}

($ok, $out) = nginx_t('rlm_provider p url=http://[::1]:8080/v1 model=m;');
ok($ok, 'an IPv6 provider URL loads') or diag($out);

# key_env reads only what nginx's env directive passes on
{
    local $ENV{RLM_DIRECTIVES_KEY} = 'sk-directives-test';
    my $http = 'rlm_provider p url=http://127.0.0.1:9/v1 '
               . 'key_env=RLM_DIRECTIVES_KEY;';

    ($ok, $out) = nginx_t($http);
    ok(!$ok, 'key_env without "env" is rejected');
    like($out, qr/rlm_provider "p": key_env=RLM_DIRECTIVES_KEY needs "env RLM_DIRECTIVES_KEY;" in the main context/,
         'key_env without env message');
    like($out, at('key_env=RLM_DIRECTIVES_KEY'), 'key_env file:line');

    ($ok, $out) = nginx_t($http, '', "\nenv RLM_DIRECTIVES_KEY;");
    ok($ok, 'key_env with "env NAME;" loads') or diag($out);

    delete $ENV{RLM_DIRECTIVES_KEY};
    ($ok, $out) = nginx_t($http, '', "\nenv RLM_DIRECTIVES_KEY;");
    ok(!$ok, 'key_env with "env NAME;" and no value is rejected');
    like($out, qr/environment variable "RLM_DIRECTIVES_KEY" is not set or empty/,
         'unset variable message');

    ($ok, $out) = nginx_t($http, '', "\nenv RLM_DIRECTIVES_KEY=sk-inline;");
    ok($ok, 'key_env with "env NAME=VALUE;" loads') or diag($out);
}

open my $pf, '>', "$dir/prompt.txt" or die $!;
print $pf "Answer in one word.\n";
close $pf;
($ok, $out) = nginx_t($provider, "rlm_completions;\n"
                      . "            rlm_system_prompt_file $dir/prompt.txt;");
ok($ok, 'rlm_system_prompt_file reads a prompt') or diag($out);

done_testing();
