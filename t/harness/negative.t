# Self-test of t/lib/Test/Nginx/Socket.pm: mistakes must be reported.
#
# Each case writes a small .t file, runs it in a child perl and asserts
# that the child FAILED, with the failure on the expected check (and,
# where it matters, that the checks around it still passed).  A control
# case proves the same machinery passes a correct file.

use strict;
use warnings;

use Cwd qw( abs_path );
use File::Basename qw( dirname );
use File::Temp qw( tempdir );
use Test::More;

my $top = abs_path(dirname(__FILE__) . '/../..');

# The runner a suite gets here is the first Test/Nginx/Util.pm on @INC
# (as `use` would load it; not loaded, it has side effects).  Ours
# defines $Test::Nginx::Util::RlmRunner; the file is read for it rather
# than compiled.  Under the CPAN Test::Nginx (make test-real) there is
# nothing for this file to check: the failures it expects are ours only.
my ($util) = grep { -f } map { "$_/Test/Nginx/Util.pm" } grep { !ref } @INC;
my $ours = $util && do {
    open my $in, '<', $util or die "$util: $!";
    local $/;
    <$in> =~ /^our \$RlmRunner = 1;/m;
};
if (!$ours) {
    plan skip_all => 'checks what only our runner (t/lib) does: unknown '
        . 'sections, client timeouts, bad configs, valgrind leaks, a stray '
        . 'server root; Test::Nginx here is ' . ($util // 'not on @INC');
}
my $tmp = tempdir('harness-neg-XXXXXX', TMPDIR => 1, CLEANUP => 1);
my $mods = '/usr/lib/nginx/modules';
my $port = 19850;

sub run_inner {
    my ($id, $module, $blocks, $env) = @_;
    my $file = "$tmp/$id.t";

    open my $out, '>', $file or die "$file: $!";
    print $out "use $module 'no_plan';\nno_shuffle();\nrun_tests();\n"
               . "__DATA__\n\n$blocks";
    close $out;

    local $ENV{TEST_NGINX_PORT} = $port;
    # each case its own root: one left unclean must not stop the next
    local $ENV{TEST_NGINX_SERVROOT} = "$tmp/servroot-$id";
    local $ENV{TEST_NGINX_LOAD_MODULES} =
        "$mods/ndk_http_module.so $mods/ngx_http_lua_module.so";
    local $ENV{TEST_NGINX_SERVER_PORT};
    delete $ENV{TEST_NGINX_SERVER_PORT};
    local $ENV{HARNESS_ACTIVE};
    delete $ENV{HARNESS_ACTIVE};
    local $ENV{TEST_NGINX_USE_VALGRIND};
    delete $ENV{TEST_NGINX_USE_VALGRIND};
    local @ENV{keys %$env} = values %$env;

    chdir $top or die "chdir $top: $!";
    my $output = `$^X -I$top/t/lib -I$top/t $file 2>&1`;
    return ($? >> 8, $output);
}

my @cases = (
    {
        id => 'control',
        ok => 1,
        blocks => <<'_EOT_',
=== TEST 1: correct expectations
--- config
    location = /t {
        add_header X-H good;
        return 200 "hello";
    }
--- request
GET /t
--- response_headers
X-H: good
--- response_body chomp
hello
--- no_error_log
[error]
_EOT_
    },
    {
        id => 'wrong_body',
        fails => qr/^not ok \d+ - .*TEST 1: body - response_body - response is expected/m,
        passes => qr/^ok \d+ - .*TEST 1: body - status code ok/m,
        blocks => <<'_EOT_',
=== TEST 1: body
--- config
    location = /t { return 200 "hello"; }
--- request
GET /t
--- response_body chomp
goodbye
_EOT_
    },
    {
        id => 'wrong_status',
        fails => qr/^not ok \d+ - .*TEST 1: status - status code ok/m,
        passes => qr/^ok \d+ - .*TEST 1: status - response_body/m,
        blocks => <<'_EOT_',
=== TEST 1: status
--- config
    location = /t { return 200 "hello"; }
--- request
GET /t
--- error_code: 404
--- response_body chomp
hello
_EOT_
    },
    {
        id => 'default_status',
        fails => qr/^not ok \d+ - .*TEST 1: implicit 200 - status code ok/m,
        blocks => <<'_EOT_',
=== TEST 1: implicit 200
--- config
    location = /t { return 500; }
--- request
GET /t
_EOT_
    },
    {
        id => 'wrong_header',
        fails => qr/^not ok \d+ - .*TEST 1: header - header X-H ok/m,
        passes => qr/^ok \d+ - .*TEST 1: header - response_body/m,
        blocks => <<'_EOT_',
=== TEST 1: header
--- config
    location = /t {
        add_header X-H actual;
        return 200 "hello";
    }
--- request
GET /t
--- response_headers
X-H: expected
--- response_body chomp
hello
_EOT_
    },
    {
        id => 'missing_header',
        fails => qr/^not ok \d+ - .*TEST 1: absent - header X-Missing ok/m,
        blocks => <<'_EOT_',
=== TEST 1: absent
--- config
    location = /t { return 200 "hello"; }
--- request
GET /t
--- response_headers
X-Missing: something
_EOT_
    },
    {
        id => 'header_must_be_absent',
        fails => qr/^not ok \d+ - .*header X-H not present in the raw headers/m,
        blocks => <<'_EOT_',
=== TEST 1: present
--- config
    location = /t {
        add_header X-H here;
        return 200 "hello";
    }
--- request
GET /t
--- response_headers
!X-H
_EOT_
    },
    {
        id => 'error_line',
        fails => qr/^not ok \d+ - .*pattern "\[error\]" should not match any line in error\.log/m,
        passes => qr/^ok \d+ - .*TEST 1: logs - response_body/m,
        blocks => <<'_EOT_',
=== TEST 1: logs
--- config
    location = /t {
        content_by_lua_block {
            ngx.log(ngx.ERR, "something broke")
            ngx.say("fine")
        }
    }
--- request
GET /t
--- response_body
fine
--- no_error_log
[error]
_EOT_
    },
    {
        id => 'rlmtest_default_no_error_log',
        module => 'RlmTest',
        fails => qr/^not ok \d+ - .*pattern "\[error\]" should not match any line in error\.log.*something broke/m,
        passes => qr/^ok \d+ - .*pattern "\[emerg\]" does not match/m,
        blocks => <<'_EOT_',
=== TEST 1: RlmTest adds no_error_log by itself
--- config
    location = /t {
        content_by_lua_block {
            ngx.log(ngx.ERR, "something broke")
            ngx.say("fine")
        }
    }
--- request
GET /t
--- response_body
fine
_EOT_
    },
    {
        id => 'missing_error_log',
        fails => qr/^not ok \d+ - .*pattern "never logged" should match a line in error\.log/m,
        blocks => <<'_EOT_',
=== TEST 1: expected log line
--- config
    location = /t { return 200 "x"; }
--- request
GET /t
--- error_log
never logged
_EOT_
    },
    {
        id => 'unsupported_section',
        fails => qr/^not ok \d+ - .*unsupported section\(s\) '--- tcp_listen'/m,
        blocks => <<'_EOT_',
=== TEST 1: tcp_listen is not implemented
--- config
    location = /t { return 200 "x"; }
--- request
GET /t
--- tcp_listen: 19899
--- tcp_reply: hi
--- response_body chomp
x
_EOT_
    },
    {
        id => 'misspelt_section',
        fails => qr/^not ok \d+ - .*unsupported section\(s\) '--- response_bdy'/m,
        blocks => <<'_EOT_',
=== TEST 1: a typo is not a silent pass
--- config
    location = /t { return 200 "x"; }
--- request
GET /t
--- response_bdy
something else
_EOT_
    },
    {
        id => 'body_like',
        fails => qr/^not ok \d+ - .*response_body_like - response is expected/m,
        blocks => <<'_EOT_',
=== TEST 1: regex body
--- config
    location = /t { return 200 "abc"; }
--- request
GET /t
--- response_body_like: ^xyz
_EOT_
    },
    {
        id => 'body_unlike',
        fails => qr/^not ok \d+ - .*response_body_unlike - response is expected/m,
        blocks => <<'_EOT_',
=== TEST 1: regex body must not match
--- config
    location = /t { return 200 "abc"; }
--- request
GET /t
--- response_body_unlike: b
_EOT_
    },
    {
        id => 'grep_error_log_out',
        fails => qr/^not ok \d+ - .*grep_error_log_out \(req 0\)/m,
        blocks => <<'_EOT_',
=== TEST 1: grep output differs
--- config
    location = /t {
        content_by_lua_block {
            ngx.log(ngx.WARN, "mark-1")
            ngx.say("x")
        }
    }
--- request
GET /t
--- grep_error_log eval: qr/mark-\d/
--- grep_error_log_out
mark-1
mark-2
_EOT_
    },
    {
        id => 'pipelined_second_wrong',
        fails => qr/^not ok \d+ - .*response_body - response is expected \(repeated req 0, req 1\)/m,
        passes => qr/^ok \d+ - .*response_body - response is expected \(repeated req 0, req 0\)/m,
        blocks => <<'_EOT_',
=== TEST 1: pipelined
--- config
    location = /a { return 200 "A"; }
    location = /b { return 200 "B"; }
--- pipelined_requests eval
["GET /a", "GET /b"]
--- response_body eval
["A", "A"]
_EOT_
    },
    {
        id => 'chunked_wrong',
        fails => qr/^not ok \d+ - .*TEST 1: chunks - response_body/m,
        blocks => <<'_EOT_',
=== TEST 1: chunks
--- config
    location = /t {
        content_by_lua_block {
            ngx.print("one") ngx.flush(true) ngx.print("two")
        }
    }
--- request
GET /t
--- response_body chomp
onethree
_EOT_
    },
    {
        id => 'timeout',
        fails => qr/^not ok \d+ - ERROR: client socket timed out/m,
        blocks => <<'_EOT_',
=== TEST 1: slow server without --- abort
--- config
    location = /t {
        content_by_lua_block { ngx.sleep(2) ngx.say("late") }
    }
--- request
GET /t
--- timeout: 0.3
--- ignore_response
_EOT_
    },
    {
        id => 'shutdown_error_log',
        fails => qr/^not ok \d+ - .*pattern "never at exit" should match a line in error\.log/m,
        blocks => <<'_EOT_',
=== TEST 1: shutdown line missing
--- config
    location = /t { return 200 "x"; }
--- request
GET /t
--- response_body chomp
x
--- shutdown_error_log
never at exit
_EOT_
    },
    {
        id => 'bad_config',
        fails => qr/^not ok \d+ - .*cannot start nginx.*no_such_directive/m,
        blocks => <<'_EOT_',
=== TEST 1: nginx refuses the config
--- config
    location = /t { no_such_directive on; }
--- request
GET /t
_EOT_
    },
    {
        id => 'undefined_env',
        fails => qr/Bail out!.*No environment TEST_NGINX_HARNESS_UNSET defined/,
        blocks => <<'_EOT_',
=== TEST 1: undefined $TEST_NGINX_ variable
--- config
    location = /t { return 200 "$TEST_NGINX_HARNESS_UNSET"; }
--- request
GET /t
_EOT_
    },
);

# Between blocks the runner removes conf/, html/, logs/, cache/, *_temp
# and *_cache from the server root, then the root itself, and bails out,
# as the CPAN runner does, if anything else was left at its top (a
# suite's runtime or trajectory dir, say).
push @cases, {
    id => 'stray_in_server_root',
    fails => qr/^Bail out!.*Can't remove \S+servroot-stray_in_server_root \(not empty\?\).*left: rlm stray\.jsonl/m,
    passes => qr/^ok \d+ - .*TEST 1: leaves a dir and a file at the top - status code ok/m,
    blocks => <<'_EOT_',
=== TEST 1: leaves a dir and a file at the top
--- config
    location = /t { return 200 "x"; }
--- init
    my $root = $Test::Nginx::Util::ServRoot;
    mkdir "$root/rlm" or die "mkdir: $!";
    open my $f, '>', "$root/stray.jsonl" or die "open: $!";
    close $f;
--- request
GET /t
--- response_body chomp
x

=== TEST 2: the next nginx
--- config
    location = /t { return 200 "y"; }
--- request
GET /t
--- response_body chomp
y
_EOT_
}, {
    id => 'temp_in_server_root',
    ok => 1,
    blocks => <<'_EOT_',
=== TEST 1: leaves *_temp and *_cache dirs and files in logs/
--- config
    location = /t { return 200 "x"; }
--- init
    my $root = $Test::Nginx::Util::ServRoot;
    for my $d ("rlm_temp", "rlm_temp/run", "traj_temp", "x_cache") {
        mkdir "$root/$d" or die "mkdir $d: $!";
    }
    open my $f, '>', "$root/logs/traj.jsonl" or die "open: $!";
    close $f;
--- request
GET /t
--- response_body chomp
x

=== TEST 2: the next nginx
--- config
    location = /t { return 200 "y"; }
--- request
GET /t
--- response_body chomp
y
_EOT_
};

my $have_valgrind = grep { -x "$_/valgrind" } split /:/, $ENV{PATH} // '';

# valgrind cannot run nginx with the ASan runtime preloaded (make asan-test)
my $asan_preloaded = ($ENV{LD_PRELOAD} // '') =~ /libasan/;

if ($have_valgrind && !$asan_preloaded) {
    push @cases, {
        id => 'valgrind_leak',
        env => { TEST_NGINX_USE_VALGRIND => 1 },
        fails => qr/^not ok \d+ - .*TEST 1: leak - valgrind: definitely lost in loss record/m,
        passes => qr/^ok \d+ - .*TEST 1: leak - response_body/m,
        blocks => <<'_EOT_',
=== TEST 1: leak
--- config
    location = /t {
        content_by_lua_block {
            local ffi = require "ffi"
            ffi.cdef "char *strdup(const char *);"
            ffi.C.strdup("leaked on purpose by the harness self-test")
            collectgarbage()
            ngx.say("ok")
        }
    }
--- request
GET /t
--- response_body
ok
_EOT_
    };

} else {
    diag($asan_preloaded
         ? 'ASan preloaded: leak reporting under valgrind not tested'
         : 'valgrind not installed: leak reporting not tested');
}

for my $case (@cases) {
    my ($status, $out) = run_inner($case->{id},
                                   $case->{module} || 'Test::Nginx::Socket',
                                   $case->{blocks}, $case->{env} || {});
    my $id = $case->{id};

    if ($case->{ok}) {
        is($status, 0, "$id: inner run passes")
            or diag($out);
        unlike($out, qr/^not ok/m, "$id: no failing inner test");
        like($out, qr/^ok \d+ - /m, "$id: inner tests ran");
        next;
    }

    isnt($status, 0, "$id: inner run fails")
        or diag($out);
    like($out, $case->{fails}, "$id: the expected check fails")
        or diag($out);
    if ($case->{passes}) {
        like($out, $case->{passes}, "$id: the other checks still pass")
            or diag($out);
    }
}

done_testing();
