package RlmApi;

# Shared setup of the HTTP API suites (t/api_*.t, t/lua_*.t):
#
#     use lib 't/api_lib';
#     use RlmTest 'no_plan';
#     use RlmApi;
#
# Every block gets, unless it sets them itself,
#   - lua_package_path with lua/ and t/api_lib/ (for rlmt.lua, the test
#     client used by driver locations);
#   - the rlm_* directives that start a real rlm-sandboxd for the block
#     (binary from $RLM_SANDBOXD or build/bin), a runtime dir inside the
#     server root and a sessions zone; a directive the block's own
#     http_config names is left out here, so a block can change any of
#     them without "is duplicate" errors;
#   - the public API locations /v1/sessions, /metrics, /healthz and the
#     Lua bridge's internal /_rlm/, unless the block's config has a
#     "# no api locations" line.
#
# nginx runs with a master process, as in production: the master
# supervises rlm-sandboxd.

use strict;
use warnings;

use Cwd qw( abs_path );
use File::Basename qw( dirname );

our $Root = abs_path(dirname(__FILE__) . '/../..');

my $sandboxd = $ENV{RLM_SANDBOXD} || "$Root/build/bin/rlm-sandboxd";

$ENV{TEST_NGINX_RLM_ROOT} ||= $Root;
$ENV{TEST_NGINX_RLM_SANDBOXD} = $sandboxd;

our @Defaults = (
    [ rlm_sandboxd       => '$TEST_NGINX_RLM_SANDBOXD' ],
    [ rlm_runtime_dir    => '$TEST_NGINX_SERVER_ROOT/rlm_temp' ],
    [ rlm_sessions_zone  => 'rlm_sessions 8m' ],
    [ rlm_pool_size      => '2' ],
    [ rlm_cell_timeout   => '10s' ],
);

our $HealthServer = <<'CONF';
    server {
        listen unix:$TEST_NGINX_SERVER_ROOT/logs/rlm-health.sock;
        location = /healthz { rlm_health; }
    }
CONF

our $ApiLocations = <<'CONF';
    location /v1/sessions { rlm_sessions_api; }
    location = /metrics { rlm_metrics; }
    location = /healthz { rlm_health; }
    location /_rlm/ { internal; rlm_sessions_api; }
CONF

Test::Nginx::Util::master_on();

# scenarios run several cells; the CPAN default of 3 s is for one request
Test::Nginx::Util::timeout($ENV{TEST_NGINX_TIMEOUT} || 60);

Test::Nginx::Util::add_block_preprocessor(sub {
    my $block = shift;
    my $http = $block->http_config // '';
    my $config = $block->config // '';
    my $pre = '';

    if ($http !~ /\blua_package_path\b/) {
        $pre .= qq{    lua_package_path "$Root/lua/?.lua;}
                . qq{$Root/t/api_lib/?.lua;;";\n};
    }

    # a block using an external manager socket does not want rlm_sandboxd
    for my $d (@Defaults) {
        my ($name, $value) = @$d;
        next if $http =~ /\b\Q$name\E\b/;
        next if $name eq 'rlm_sandboxd' && $http =~ /\brlm_sandboxd_socket\b/;
        next if $http =~ /#\s*no sandboxd/ && $name eq 'rlm_sandboxd';
        $pre .= "    $name $value;\n";
    }

    $block->set_value('http_config', $pre . $http);

    if ($config !~ /#\s*no api locations/) {
        $block->set_value('config', $ApiLocations . $config);
    }

    # nginx is up before its rlm-sandboxd is: wait (bounded) until the
    # manager answers, so the first request of a block does not race it
    if (!defined $block->init && $block->http_config !~ /#\s*no sandboxd/
        && $block->http_config !~ /\brlm_sandboxd_socket\b/)
    {
        $block->set_value('init', 'RlmApi::wait_manager();');
        $block->set_value('http_config', $block->http_config . $HealthServer);
    }
});

# poll GET /healthz on an extra server (unix socket) until the manager is
# reachable (at most 10 s; the block's own checks report what follows)
sub wait_manager {
    require IO::Socket::UNIX;
    my $path = "$ENV{TEST_NGINX_SERVER_ROOT}/logs/rlm-health.sock";
    for (1 .. 100) {
        my $sock = IO::Socket::UNIX->new(Peer => $path);
        if ($sock) {
            print $sock "GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n";
            local $/;
            my $resp = <$sock> // '';
            close $sock;
            return 1 if $resp =~ /"manager":"reachable"/;
        }
        select(undef, undef, undef, 0.1);
    }
    return 0;
}

1;
