# The trajectory viewer (conf/viewer/) in a real browser: Debian's
# chromium, headless, driven by npm puppeteer-core (pinned in the
# Makefile, installed by `make npm-deps` into build/npm).  The block's
# init runs t/viewer/drive.cjs against the block's nginx: it makes a
# completion whose model output is hostile markup (scripted upstream, real
# sandboxes, an rlm_query child), then lists, opens and steps through it
# in the page with an API key, without one in a new tab, and opens a
# JSONL file in the reference library's shape and pasted lines.  Its
# observations become html/viewer.out, which the request compares.
#
# Needs node, chromium and build/npm/node_modules/puppeteer-core.
# Without them the file is skipped, except when RLM_REQUIRE_NODE or CI is
# set (as .ci/run does): then it fails.

use FindBin;
use lib "$FindBin::Bin/api_lib";
use lib "$FindBin::Bin/loop_lib";
use RlmTest;
use RlmLoop;

use File::Spec ();

our $Root = $RlmTest::Root;
our $Modules = $ENV{RLM_NODE_MODULES} || "$Root/build/npm/node_modules";
our $Chromium = $ENV{RLM_CHROMIUM} || '/usr/bin/chromium';
our $Node;

{
    my $required = grep { defined $_ && $_ ne '' && $_ ne '0'
                          && lc $_ ne 'false' }
                   @ENV{qw( RLM_REQUIRE_NODE CI )};
    my $why;

    ($Node) = grep { -x $_ }
              map { File::Spec->catfile($_, 'node') }
              File::Spec->path;

    if (!defined $Node) {
        $why = 'node is not installed (apt-get install nodejs npm)';

    } elsif (!-x $Chromium) {
        $why = "no browser at $Chromium (apt-get install chromium)";

    } elsif (!-f "$Modules/puppeteer-core/package.json") {
        $why = "the puppeteer-core npm package is not in $Modules"
               . ' (make npm-deps)';
    }

    if (defined $why) {
        if ($required) {
            plan tests => 1;
            fail("viewer test cannot run: $why;"
                 . ' RLM_REQUIRE_NODE or CI is set, so this is a failure');
            exit 1;
        }
        plan skip_all => $why;
    }

    plan 'no_plan';
}

our $Key = 'sk-viewer-test-41d7';

sub run_viewer {
    my $out = '';

    local $ENV{NODE_PATH} = $Modules;
    local $ENV{RLM_VIEWER_KEY} = $Key;
    local $ENV{RLM_CHROMIUM} = $Chromium;
    local $ENV{RLM_VIEWER_FIXTURE} = "$Root/t/viewer/reference_sample.jsonl";

    # stderr into the output, so that a crash shows in the body diff;
    # coreutils timeout: a hung browser must not hang the suite
    if (open my $fh, '-|', 'sh', '-c', 'exec "$@" 2>&1', 'sh',
             'timeout', '120', $Node, "$Root/t/viewer/drive.cjs",
             'http://127.0.0.1:' . server_port())
    {
        local $/;
        $out = <$fh> // '';
        close $fh;
        $out .= 'exit ' . ($? >> 8) . "\n";

    } else {
        $out = "cannot run $Node: $!\n";
    }

    open my $fh, '>', html_dir() . '/viewer.out' or die "viewer.out: $!";
    print $fh $out;
    close $fh;
}

add_block_preprocessor(sub {
    my $block = shift;

    $block->set_value('init', 'main::run_viewer();');

    if (!defined $block->request) {
        $block->set_value('request', "GET /viewer.out\n");
    }
});

no_shuffle();
run_tests();

__DATA__

=== TEST 1: list, open and step through a completion; hostile output stays text; the key goes with every API request; a reference-library file and pasted lines
--- http_config
    rlm_trajectory_dir traj_temp;
    rlm_completion_code_models "script:child echo";
--- config

    # as conf/rlm.conf serves it
    location /viewer/ {
        alias $TEST_NGINX_RLM_ROOT/conf/viewer/;
        types { text/html html; text/javascript js; }
        charset utf-8;
        add_header Content-Security-Policy "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'" always;
        add_header X-Content-Type-Options nosniff always;
    }

    # a stand-in for the policy: one key opens the trajectories
    location ~ ^/v1/sessions/[^/]+/trajectories(/.*)?$ {
        access_by_lua_block {
            if ngx.var.http_authorization ~= "Bearer sk-viewer-test-41d7"
            then
                ngx.status = 401
                ngx.header.content_type = "application/json"
                ngx.say('{"error":{"message":"a valid API key is required",'
                        .. '"type":"invalid_request_error","param":null,'
                        .. '"code":"invalid_api_key"}}')
                return ngx.exit(401)
            end
        }
        rlm_trajectories;
    }
--- timeout: 150
--- response_body
completion 200 <img src=y onerror="window.__pwned=4">the end
page 200 text/html; charset=utf-8 csp true
listed 1 status 1 completions in this session.
position Iteration 1 of 2
run script:root | script:child | mock | ngx_rlm
totals 2 iterations, 2 code blocks, 3 sub-calls (1 child RLMs), root 320 in / 40 out tokens, sub-calls 58 in / 17 out tokens
response text true
stdout text true
calls llm_query_batched:</script> llm_query_batched:two rlm_query:<svg onlo
child Child RLM: 1 iterations | child says <iframe src=javascript:window.__pwned=5>
child tokens 7 in / 9 out tokens | 1 in / 3 out tokens | 50 in / 5 out tokens
hostile img=0 iframe=0 svg=0 b=0 scripts=1 pwned=undefined
position Iteration 2 of 2
final <img src=y onerror="window.__pwned=4">the end
arrow left Iteration 1 of 2
hostile img=0 iframe=0 svg=0 b=0 scripts=1 pwned=undefined
reload key kept true
new tab key "" session from hash true
no key HTTP 401: a valid API key is required
file Showing reference_sample.jsonl: 3 iterations
file run reference_sample.jsonl | gpt-5-mini | openai | local | 1 | 8
file 2 Iteration 2 of 3 | call gpt-5-nano | 31 in / 4 out tokens, 0.90 s | Marrow Bay
file 3 Iteration 3 of 3 | Marrow Bay
paste Showing pasted lines: 1 iterations, 1 lines skipped
paste final <img src=q onerror=window.__pwned=9>
hostile img=0 iframe=0 svg=0 b=0 scripts=1 pwned=undefined
dialogs 0 page errors 0 foreign requests 0
api requests 3 with key 2
done
exit 0
