package Test::Nginx::Socket::Lua;

# Same runner as Test::Nginx::Socket, under the name lua-nginx-module's
# own suites use.  Like the CPAN module it honours TEST_NGINX_INIT_BY_LUA:
# that Lua code is prepended to the block's init_by_lua (or added as one).

use Test::Nginx::Socket -base;

if (my $code = $ENV{TEST_NGINX_INIT_BY_LUA}) {
    $code =~ s/\\/\\\\/g;
    $code =~ s/['"]/\\$&/g;

    Test::Nginx::Socket::set_http_config_filter(sub {
        my $config = shift;
        return $config if $config =~ /init_by_lua_file/;
        if ($config !~ s{init_by_lua\s*(['"])((?:\\.|.)*)\1\s*;}
                        {init_by_lua $1$code$2$1;}s)
        {
            $config .= "\ninit_by_lua '$code';\n";
        }
        return $config;
    });
}

1;
