package RlmRun;

# Runs nginx on the configuration `make run` writes, for t/conf_auth.t
# and t/conf_run.t: `make run-prefix` into a temporary directory (with
# the environment given), nginx started on it in the background, plain
# HTTP/1.0 requests over a socket, and an nginx parser that lists the
# servers and locations of the files nginx really reads.
#
# Plain Test::More, no Test::Nginx: the configuration under test is the
# shipped one, not a generated test block.  It runs the same under our
# runner and under the CPAN Test::Nginx (it uses neither).

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(dirname);
use File::Temp qw(tempdir);
use IO::Socket::INET;
use JSON::PP ();
use POSIX ();
use Time::HiRes qw(sleep);

our $Top = abs_path(dirname(__FILE__) . '/../..');
our $Nginx = $ENV{TEST_NGINX_BINARY} || '/usr/sbin/nginx';
our $Build = $ENV{RLM_BUILD} || "$Top/build";

my @started;


# the module's build, or the reason to skip
sub missing {
    return "module not built ($Build/ngx_http_rlm_module.so)"
        unless -f "$Build/ngx_http_rlm_module.so";
    return "rlm-sandboxd not built" unless -x "$Build/bin/rlm-sandboxd";
    return "needs root (rlm-sandboxd's jails)" if $> != 0;
    return undef;
}


# a port p with p and p + 1 free on every address (make run listens on
# PORT, and the demo model on PORT + 1)
sub free_port_pair {
    for (1 .. 50) {
        my $s = IO::Socket::INET->new(Listen => 1, LocalAddr => '0.0.0.0',
                                      LocalPort => 0, ReuseAddr => 1)
            or next;
        my $p = $s->sockport;
        close $s;
        next if $p > 65000;
        my $t = IO::Socket::INET->new(Listen => 1, LocalAddr => '0.0.0.0',
                                      LocalPort => $p + 1, ReuseAddr => 1)
            or next;
        close $t;
        return $p;
    }
    die "no free pair of ports\n";
}


sub free_port {
    my $s = IO::Socket::INET->new(Listen => 1, LocalAddr => '127.0.0.1',
                                  LocalPort => 0, ReuseAddr => 1)
        or die "no free port: $!\n";
    my $p = $s->sockport;
    close $s;
    return $p;
}


# make run-prefix with exactly this environment (the RLM_* variables
# not given are removed) -> the prefix directory
sub make_prefix {
    my (%env) = @_;

    my $port = delete $env{PORT} or die "make_prefix: PORT\n";
    my $run = tempdir('rlm-run-XXXXXX', TMPDIR => 1, CLEANUP => 1);

    # the workers (user nobody) go through it to the manager's sockets
    chmod 0755, $run;

    local %ENV = %ENV;
    delete @ENV{qw( RLM_UPSTREAM_URL RLM_API_KEY RLM_MODEL RLM_SUB_MODEL
                    RLM_KEYS_FILE RLM_ROUTES_FILE RLM_LISTEN RLM_CONF_D
                    RLM_NODE_ID RLM_NODES )};
    @ENV{keys %env} = values %env;

    system('make', '-s', '-C', $Top, "BUILD=$Build", "RUN_DIR=$run",
           "PORT=$port", 'run-prefix') == 0
        or die "make run-prefix failed\n";

    return $run;
}


# starts nginx (master + sandbox manager) on a prefix and waits until
# /healthz says the manager answers; stderr (error_log) goes to
# logs/stderr.log
sub start_nginx {
    my ($run, $port) = @_;

    system("$Nginx -p $run/ -c conf/rlm.conf -e logs/stderr.log"
           . " >$run/logs/stdout.log 2>$run/logs/stderr.log") == 0
        or die "nginx did not start:\n"
               . (slurp("$run/logs/stderr.log") // '');

    push @started, $run;

    for (1 .. 300) {
        my $r = request('127.0.0.1', $port, 'GET', '/healthz');
        return 1 if $r->{status} && $r->{status} == 200;
        sleep 0.1;
    }

    die "the sandbox manager did not come up:\n"
        . (slurp("$run/logs/stderr.log") // '');
}


sub stop_nginx {
    my ($run) = @_;

    my $pid = slurp("$run/logs/nginx.pid") // '';
    return unless $pid && $pid =~ /^(\d+)/;
    $pid = $1;

    kill 'QUIT', $pid;
    for (1 .. 200) {
        return 1 unless kill 0, $pid;
        sleep 0.05;
    }
    kill 'KILL', $pid;
}


# a second nginx serving t/lib/mock_llm.lua at /v1/chat/completions,
# /mock/script and /mock/requests -> its base URL
sub start_mock {
    my $port = free_port();
    my $dir = tempdir('rlm-mock-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    mkdir "$dir/$_" for qw(conf logs);

    my @mods = grep { -f } qw(/usr/lib/nginx/modules/ndk_http_module.so
                              /usr/lib/nginx/modules/ngx_http_lua_module.so);
    my $load = join '', map { "load_module $_;\n" } @mods;

    open my $fh, '>', "$dir/conf/nginx.conf" or die "$dir: $!\n";
    print $fh <<"CONF";
$load
worker_processes 1;
error_log logs/error.log info;
pid logs/nginx.pid;
events { worker_connections 256; }
http {
    access_log off;
    lua_package_path "$Top/t/lib/?.lua;$Top/lua/?.lua;;";
    lua_shared_dict mock_llm 8m;
    server {
        listen 127.0.0.1:$port;
        location = /v1/chat/completions {
            content_by_lua_block { require("mock_llm").serve() }
        }
        location = /mock/script {
            content_by_lua_block { require("mock_llm").script() }
        }
        location = /mock/requests {
            content_by_lua_block { require("mock_llm").requests() }
        }
    }
}
CONF
    close $fh;

    system("$Nginx -p $dir/ -c conf/nginx.conf -e logs/error.log"
           . " >/dev/null 2>&1") == 0
        or die "the mock upstream did not start:\n"
               . (slurp("$dir/logs/error.log") // '');

    push @started, $dir;

    for (1 .. 100) {
        my $r = request('127.0.0.1', $port, 'GET', '/mock/requests');
        return ("http://127.0.0.1:$port", $port) if $r->{status};
        sleep 0.05;
    }

    die "the mock upstream does not answer\n";
}


END {
    my $rc = $?;
    stop_nginx($_) for reverse @started;
    $? = $rc;
}


# a file's text, undef if it cannot be read
sub slurp {
    my ($path) = @_;
    open my $fh, '<', $path or return undef;
    local $/;
    return scalar <$fh>;
}


# request($addr, $port, $method, $uri, \%headers, $body, \%opts)
# -> { status, headers => { lowercase => value }, body, json, error }
# HTTP/1.0, so the server closes after the answer.  opts: timeout
# (seconds, 30), no_body (send the headers only, whatever
# Content-Length says), raw (the request bytes as is).
sub request {
    my ($addr, $port, $method, $uri, $headers, $body, $opts) = @_;
    $headers ||= {};
    $opts ||= {};

    my $res = { status => 0, headers => {}, body => '' };

    my $s = IO::Socket::INET->new(PeerAddr => $addr, PeerPort => $port,
                                  Timeout => 5);
    if (!$s) {
        $res->{error} = "connect: $!";
        return $res;
    }

    my $req = $opts->{raw};
    if (!defined $req) {
        $req = "$method $uri HTTP/1.0\r\nHost: localhost\r\n";
        my %h = %$headers;
        if (defined $body && !grep { lc eq 'content-length' } keys %h) {
            $h{'Content-Length'} = length $body;
        }
        $req .= "$_: $h{$_}\r\n" for sort keys %h;
        $req .= "\r\n";
        $req .= $body if defined $body && !$opts->{no_body};
    }

    $s->autoflush(1);
    print $s $req;

    my $raw = '';
    my $timeout = $opts->{timeout} || 30;
    my $ok = eval {
        local $SIG{ALRM} = sub { die "timeout\n" };
        alarm $timeout;
        while (1) {
            my $n = sysread($s, my $buf, 65536);
            last if !$n;
            $raw .= $buf;
        }
        alarm 0;
        1;
    };
    alarm 0;
    close $s;

    if (!$ok) {
        $res->{error} = "no complete answer within $timeout s";
    }

    my ($head, $rest) = split /\r\n\r\n/, $raw, 2;
    return $res unless defined $head && $head =~ m{^HTTP/\S+ (\d+)};

    $res->{status} = $1;
    for my $line (split /\r\n/, $head) {
        next unless $line =~ /^([^:\s]+):\s*(.*)$/;
        $res->{headers}{lc $1} = $2;
    }
    $res->{body} = $rest // '';
    $res->{json} = eval { JSON::PP::decode_json($res->{body}) };

    return $res;
}


# the OpenAI envelope: {"error":{"message","type","param","code"}}, the
# four members present, message/type/code strings -> '' or why not
sub envelope_problem {
    my ($r) = @_;

    return "no answer ($r->{error})" if !$r->{status} && $r->{error};
    my $ct = $r->{headers}{'content-type'} // '';
    return "Content-Type is '$ct'" unless $ct =~ m{^application/json};

    my $e = ref $r->{json} eq 'HASH' && $r->{json}{error};
    return "body is not an error envelope: " . substr($r->{body}, 0, 200)
        unless ref $e eq 'HASH';

    for my $k (qw(message type param code)) {
        return "error.$k is missing" unless exists $e->{$k};
    }
    for my $k (qw(message type code)) {
        return "error.$k is not a string"
            unless defined $e->{$k} && !ref $e->{$k};
    }

    return '';
}


# error.code of an envelope, undef for anything else
sub error_code {
    my ($r) = @_;
    my $e = ref $r->{json} eq 'HASH' ? $r->{json}{error} : undef;
    return ref $e eq 'HASH' ? $e->{code} : undef;
}


# ---- the configuration as nginx reads it ------------------------------

# tokens of one file: words, '{', '}', ';', and comments
sub tokens {
    my ($text) = @_;
    my @t;

    pos($text) = 0;
    while (pos($text) < length $text) {
        if ($text =~ /\G\s+/gc) {
            next;
        }
        if ($text =~ /\G#([^\n]*)/gc) {
            push @t, { comment => $1 };
        } elsif ($text =~ /\G([{};])/gc) {
            push @t, { punct => $1 };
        } elsif ($text =~ /\G"((?:[^"\\]|\\.)*)"/gcs
                 || $text =~ /\G'((?:[^'\\]|\\.)*)'/gcs)
        {
            push @t, { word => $1 };
        } elsif ($text =~ /\G((?:[^\s{};"'\\]|\\.)+)/gc) {
            push @t, { word => $1 };
            if ($1 =~ /_by_lua_block$/ && $text =~ /\G\s*\{/gc) {
                push @t, { word => lua_block(\$text) }, { punct => ';' };
            }
        } else {
            die "cannot tokenize at: "
                . substr($text, pos($text), 40) . "\n";
        }
    }

    return \@t;
}


# the Lua code of a *_by_lua_block, from after its "{" to its "}" (as
# nginx reads it: braces in Lua strings and comments do not count)
sub lua_block {
    my ($tref) = @_;
    my $depth = 1;
    my $from = pos($$tref);

    while ($depth > 0) {
        if ($$tref =~ /\G--\[(=*)\[.*?\]\1\]/gcs
            || $$tref =~ /\G--[^\n]*/gc
            || $$tref =~ /\G\[(=*)\[.*?\]\1\]/gcs
            || $$tref =~ /\G"(?:[^"\\\n]|\\.)*"/gcs
            || $$tref =~ /\G'(?:[^'\\\n]|\\.)*'/gcs
            || $$tref =~ /\G[^{}"'\[-]+/gc
            || $$tref =~ /\G[\[-]/gc)
        {
            next;
        }
        if ($$tref =~ /\G\{/gc) {
            $depth++;
        } elsif ($$tref =~ /\G\}/gc) {
            $depth--;
        } else {
            die "unterminated Lua block\n";
        }
    }

    return substr($$tref, $from, pos($$tref) - $from - 1);
}


# the directives of a file, includes expanded (relative to $confdir):
# [ { name, args => [...], block => [...] | undef, comments => [...] } ]
sub parse_file {
    my ($path, $confdir) = @_;

    my $toks = tokens(slurp($path)
                      // die "cannot read $path\n");
    my $i = 0;
    my $list = parse_block($toks, \$i, $confdir, 0);
    return $list;
}


sub parse_block {
    my ($toks, $ip, $confdir, $nested) = @_;
    my (@out, @words, @comments);

    while ($$ip < @$toks) {
        my $t = $toks->[$$ip++];

        if (exists $t->{comment}) {
            push @comments, $t->{comment} unless @words;
            next;
        }

        if (exists $t->{word}) {
            push @words, $t->{word};
            next;
        }

        my $p = $t->{punct};

        if ($p eq '}') {
            die "unexpected }\n" unless $nested && !@words;
            return \@out;
        }

        die "a '$p' without a directive\n" unless @words;
        my ($name, @args) = @words;
        @words = ();

        my $d = { name => $name, args => \@args, comments => [@comments] };
        @comments = ();

        if ($p eq '{') {
            $d->{block} = parse_block($toks, $ip, $confdir, 1);
            push @out, $d;
            next;
        }

        if ($name eq 'include') {
            my $pat = $args[0];
            $pat = "$confdir/$pat" unless $pat =~ m{^/};
            for my $f (sort glob $pat) {
                push @out, @{ parse_file($f, $confdir) };
            }
            next;
        }

        push @out, $d;
    }

    die "missing }\n" if $nested;
    return \@out;
}


# [ { listen => [...], locations => [ loc, ... ], directives => [...] } ]
# loc = { modifier, pattern, block, comments, marker, kind }
# kind: 'open' or 'loopback' from a comment right above the location
# starting with "open:" or "loopback only:", else undef
sub servers {
    my ($run) = @_;

    my $main = parse_file("$run/conf/rlm.conf", "$run/conf");
    my ($http) = grep { $_->{name} eq 'http' } @$main;
    die "no http block\n" unless $http;

    my @servers;
    for my $s (grep { $_->{name} eq 'server' } @{ $http->{block} }) {
        my @listen = map { $_->{args}[0] }
                     grep { $_->{name} eq 'listen' } @{ $s->{block} };
        my @locs;
        collect_locations($s->{block}, \@locs);
        push @servers, { listen => \@listen, locations => \@locs,
                         directives => $s->{block} };
    }

    return \@servers;
}


sub collect_locations {
    my ($block, $out) = @_;

    for my $d (@$block) {
        next unless $d->{name} eq 'location';

        my @a = @{ $d->{args} };
        my ($mod, $pat) = @a == 2 ? @a : ('', $a[0]);

        my $kind;
        for my $c (@{ $d->{comments} }) {
            if ($c =~ /^\s*open:/) {
                $kind = 'open';
            } elsif ($c =~ /^\s*loopback only:/) {
                $kind = 'loopback';
            }
        }

        push @$out, { modifier => $mod, pattern => $pat,
                      block => $d->{block}, comments => $d->{comments},
                      kind => $kind };

        collect_locations($d->{block}, $out);
    }
}


sub has {
    my ($loc, $name) = @_;
    return grep { $_->{name} eq $name } @{ $loc->{block} };
}


sub name_of {
    my ($loc) = @_;
    return join ' ', grep { length } $loc->{modifier}, $loc->{pattern};
}


# the location nginx picks for a URI, by its rules: an exact match; else
# the longest prefix, which wins with ^~; else the first regular
# expression that matches, in file order; else the longest prefix
sub pick {
    my ($locs, $uri) = @_;

    my @usable = grep { $_->{pattern} !~ /^@/ } @$locs;

    for my $l (@usable) {
        return $l if $l->{modifier} eq '=' && $l->{pattern} eq $uri;
    }

    my $best;
    for my $l (@usable) {
        next unless $l->{modifier} eq '' || $l->{modifier} eq '^~';
        next unless substr($uri, 0, length $l->{pattern}) eq $l->{pattern};
        $best = $l if !$best
                      || length $l->{pattern} > length $best->{pattern};
    }

    return $best if $best && $best->{modifier} eq '^~';

    for my $l (@usable) {
        next unless $l->{modifier} eq '~' || $l->{modifier} eq '~*';
        my $re = $l->{modifier} eq '~' ? qr/$l->{pattern}/
                                       : qr/$l->{pattern}/i;
        return $l if $uri =~ $re;
    }

    return $best;
}


# a URI that reaches this location (checked with pick()), or undef
sub uri_for {
    my ($locs, $loc) = @_;

    my $p = $loc->{pattern};
    my $hex = '0123456789abcdef' x 2;
    my @try;

    if ($loc->{modifier} eq '=') {
        @try = ($p);
    } elsif ($loc->{modifier} eq '~' || $loc->{modifier} eq '~*') {
        my $u = $p;
        $u =~ s/^\^//;
        $u =~ s/\$$//;
        $u =~ s/\((?:[^()\\]|\\.)*\)[?*]//g;     # optional groups
        $u =~ s/\[\^\/\]\+/$hex/g;               # [^/]+
        $u =~ s/\[0-9a-f\]\{32\}/$hex/g;
        $u =~ s/\.\*//g;
        $u =~ s/\\(.)/$1/g;
        @try = ($u);
    } elsif ($p =~ m{/$}) {
        @try = ("${p}sessions", "${p}walk");
    } else {
        @try = ($p, "$p/walk");
    }

    for my $u (@try) {
        my $got = pick($locs, $u);
        return $u if $got && $got == $loc;
    }

    return undef;
}


# the addresses of this host that are not loopback (ip -o -4 addr)
sub external_addresses {
    my @out;
    for my $line (`ip -o -4 addr show scope global 2>/dev/null`) {
        push @out, $1 if $line =~ /\binet\s+(\d+\.\d+\.\d+\.\d+)/;
    }
    return @out;
}


1;
