package Test::Nginx::Socket;

# A Test::Nginx::Socket-compatible, data-driven test runner for nginx,
# written for ngx_rlm because Test::Nginx is not packaged in Debian.
#
# Each "=== TEST" block gets a fresh nginx (config from the block), one
# or more HTTP requests sent over a raw socket, and checks on status,
# headers, body and the error log lines the block produced.  Section
# names, test names and test counts follow the CPAN module, so a .t file
# runs unchanged under either.  Sections this runner does not implement
# are reported as a failing test, never ignored.  See docs/testing.md.

use v5.10.1;
use Test::Base -base;

use Encode ();
use HTTP::Response ();
use IO::Select ();
use IO::Socket::INET ();
use List::Util qw( min );
use POSIX qw( EAGAIN EINTR WNOHANG );
use Test::LongString;
use Time::HiRes qw( sleep time );

use Test::Nginx::Util;

our $VERSION = '0.29_rlm';

our @EXPORT = qw(
    env_to_nginx is_str plan run_tests run_test repeat_each
    config_preamble worker_connections master_process_enabled
    no_long_string workers master_on master_off log_level no_shuffle
    no_root_location server_name server_addr server_root html_dir
    server_port server_port_for_client timeout no_nginx_manager
    check_accum_error_log add_block_preprocessor bail_out
    add_cleanup_handler add_response_body_check
);

our @ResponseBodyChecks;

# Every section this runner understands.  Anything else in a block is
# reported as a failure: a silently ignored check is a passing lie.
our %KnownSections = map { $_ => 1 } qw(
    ONLY LAST SKIP
    main_config post_main_config http_config config user_files init
    request request_eval raw_request raw_request_middle_delay
    pipelined_requests more_headers shutdown abort timeout wait
    server_addr_for_client
    server_name error_log_file log_level must_die ignore_response
    error_code error_code_like
    response_headers response_headers_like
    raw_response_headers_like raw_response_headers_unlike
    response_body response_body_eval response_body_like
    response_body_unlike response_body_filters charset
    error_log no_error_log grep_error_log grep_error_log_out
    shutdown_error_log no_shutdown_error_log
    access_log no_access_log
    skip_nginx skip_eval todo
);

$Test::Nginx::Util::RunTestHelper = \&run_test_helper;
$Test::Nginx::Util::CheckErrorLog = \&check_error_log;
$Test::Nginx::Util::CheckShutdownErrorLog = \&check_shutdown_error_log;

# Extension (not in CPAN Test::Nginx): declare extra section names that
# a block preprocessor consumes, so they are not reported as unknown.
sub register_sections (@) {
    $KnownSections{$_} = 1 for @_;
}

sub add_response_body_check ($) {
    push @ResponseBodyChecks, shift;
}

sub set_http_config_filter ($) {
    $Test::Nginx::Util::FilterHttpConfig = shift;
}

# ---- one block ------------------------------------------------------------

sub run_test ($) {
    my $block = shift;

    return if defined $block->SKIP;

    my $name = $block->name;

    my @unknown = grep { !$KnownSections{$_} }
                  @{ $block->_section_order || [] };
    if (@unknown) {
        Test::More::fail("$name - unsupported section(s) "
            . join(', ', map { "'--- $_'" } @unknown)
            . ": not implemented by t/lib/Test/Nginx/Socket.pm");
        return;
    }

    my $rand_ports = {};
    my $config = expand_env_in_text($block->config, $name, $rand_ports);

    local $Test::Nginx::Util::LogLevel = $Test::Nginx::Util::LogLevel;
    if ($block->log_level) {
        $Test::Nginx::Util::LogLevel = $block->log_level;
    }

    my ($should_skip, $tests_to_skip, $skip_reason);
    my ($should_todo, $todo_reason);

    if (defined(my $spec = $block->skip_nginx)) {
        if ($spec !~ /^\s*(\d+)\s*:\s*([<>]=?)\s*(\d+)\.(\d+)\.(\d+)
                      (?:\s*:\s*(.*))?\s*$/x)
        {
            bail_out("$name - Invalid --- skip_nginx spec: $spec");
        }
        $tests_to_skip = $1;
        my ($op, $ver) = ($2, get_canon_version($3, $4, $5));
        $skip_reason = $6 || "nginx version $op $3.$4.$5";
        $should_skip = eval "$NginxVersion $op $ver";
    }

    if (defined(my $spec = $block->skip_eval)) {
        if ($spec =~ /^\s*(\d+)\s*:\s*(.*)/s) {
            $tests_to_skip = $1;
            $skip_reason = 'skip_eval';
            my $code = $2;
            $should_skip = eval "package main; $code";
            bail_out("$name - skip_eval - failed to eval \"$code\": $@")
                if $@;
        }
    }

    if (defined(my $spec = $block->todo)) {
        if ($spec !~ /^\s*(\d+)\s*:\s*(.*)/s) {
            bail_out("$name - Invalid --- todo spec: $spec");
        }
        ($should_todo, $tests_to_skip, $todo_reason) = (1, $1, $2);
    }

    my $must_die = $block->must_die;

    if (!$should_skip && !$Test::Nginx::Util::NoNginxManager) {
        if (defined $config) {
            Test::Nginx::Util::stop_nginx($name);
            Test::Nginx::Util::check_prev_block_shutdown_error_log();
            Test::Nginx::Util::check_prev_block_valgrind_log();
            Test::Nginx::Util::setup_server_root();
            Test::Nginx::Util::write_user_files($block, $rand_ports);
            Test::Nginx::Util::write_config_file($block, $config,
                                                 $rand_ports);

            my ($ok, $msg) = Test::Nginx::Util::start_nginx($name,
                                                             $must_die);
            undef $Test::Nginx::Util::PrevConfig;

            if (defined $must_die) {
                check_must_die($block, $ok, $msg);
                return;
            }

            if (!$ok) {
                Test::More::fail("$name - $msg");
                return;
            }

            $Test::Nginx::Util::PrevConfig = $config;
            $Test::Nginx::Util::ErrLogFilePos = 0;
            sleep sleep_time();

        } elsif (!defined $Test::Nginx::Util::PrevConfig) {
            bail_out("$name - No '--- config' section specified and "
                     . "no nginx from a previous block is running");

        } else {
            # reuse the running nginx; only look at lines from now on
            $Test::Nginx::Util::ErrLogFilePos = -s $ErrLogFile || 0;
        }
    }

    if (defined(my $code = $block->init)) {
        eval "package main; $code";
        bail_out("$name - init failed: $@") if $@;
    }

    for my $i (0 .. $RepeatEach - 1) {
        if ($i > 0) {
            Test::Nginx::Util::write_user_files($block, $rand_ports);
        }

        if ($should_skip && defined $tests_to_skip) {
            SKIP: {
                Test::More::skip("$name - " . ($skip_reason
                                 // 'various reasons'), $tests_to_skip);
            }

        } elsif ($should_todo) {
            TODO: {
                Test::More::todo_skip("$name - $todo_reason",
                                      $tests_to_skip);
            }

        } else {
            run_test_helper($block, 0, $i);
        }
    }
}

sub check_must_die ($$$) {
    my ($block, $status, $stderr) = @_;
    my $name = $block->name;
    my $must_die = $block->must_die;

    if ($status == -1 || ($status >> 8) == 127) {
        Test::More::fail("$name - failed to execute the nginx command");

    } elsif ($status & 128) {
        Test::More::fail("$name - nginx core dumped");

    } elsif ($must_die =~ /^\d+$/) {
        Test::More::is($must_die, $status >> 8,
                       "$name - die with the expected exit code");

    } else {
        Test::More::isnt($status, 0, "$name - die as expected");
    }

    # config errors go to stderr before error.log is opened
    if ($stderr ne '' && open my $out, '>>', $ErrLogFile) {
        print $out $stderr;
        close $out;
    }

    check_error_log($block, undef, 0, 0, 0);

    if ($status == 0) {
        warn "WARNING: $name - nginx must die but it does not\n";
        Test::Nginx::Util::stop_nginx($name);
    }
}

# ---- requests ---------------------------------------------------------------

sub parse_more_headers ($) {
    my $in = shift;
    my ($out, $is_chunked) = ('', 0);

    for my $line (split /\n+/, $in // '') {
        next if $line =~ /^\s*#/;
        my ($key, $val) = split /:\s*/, $line, 2;
        $val //= '';
        $is_chunked = 1
            if lc($key) eq 'transfer-encoding' && $val eq 'chunked';
        $out .= "$key: $val\r\n";
    }

    return ($out, $is_chunked);
}

# Turn "METHOD [URI [VERSION]]\nbody" into a full HTTP request and keep
# the packet boundaries of the original text (for split-packet tests).
sub build_request ($$$$$) {
    my ($name, $packets, $more_headers, $is_chunked, $conn) = @_;

    my $text = join '', @$packets;

    $text =~ /\A(\s*)([^\n]*)(?:\n|\z)/
        or bail_out("$name - Request line should be non-empty");
    my ($lead, $line) = ($1, $2);
    my $line_start = length $lead;
    my $body_start = $line_start + length($line)
                     + (length($text) > $line_start + length($line) ? 1 : 0);

    my ($meth, $url, $ver) = split ' ', $line;
    bail_out("$name - Request line should be non-empty") unless $meth;
    $url //= '/';
    $ver //= 'HTTP/1.1';

    my $body = substr $text, $body_start;
    my $trim_lead = 0;
    my $len_header = '';

    if (!$is_chunked && $body ne ''
        && $more_headers !~ /(?:^|\n)Content-Length:/)
    {
        $body =~ /\A(\s*)/;
        $trim_lead = length $1;
        $body =~ s/^\s+|\s+$//gs;
        $len_header = 'Content-Length: ' . length($body) . "\r\n";
    }

    my $headers = '';
    $headers .= "Host: $ServerName\r\n"
        if $more_headers !~ /(?:^|\n)Host:/msi;
    $headers .= "Connection: $conn\r\n"
        if $more_headers !~ /(?:^|\n)Connection/msi;

    (my $extra = $more_headers) =~ s/(?<!\r)\n/\r\n/gs;
    my $head = "$meth $url $ver\r\n$headers$extra$len_header\r\n";
    my $req = $head . $body;

    return [$req] if @$packets <= 1;

    # map each original boundary into the new request
    my (@cuts, $off);
    $off = 0;
    for my $p (@$packets[0 .. $#$packets - 1]) {
        $off += length $p;
        my $new;
        if ($off <= $body_start) {
            $new = $off - $line_start;
            $new = 0 if $new < 0;
            $new = length($head) if $new > length($head);
            # a cut at the end of the request line goes after the headers
            $new = length($head) if $off >= $body_start;

        } else {
            $new = length($head) + $off - $body_start - $trim_lead;
            $new = length($head) if $new < length($head);
            $new = length($req) if $new > length($req);
        }
        push @cuts, $new;
    }

    my (@out, $prev);
    $prev = 0;
    for my $c (@cuts, length $req) {
        $c = $prev if $c < $prev;
        push @out, substr($req, $prev, $c - $prev);
        $prev = $c;
    }

    return \@out;
}

sub headers_for ($$$) {
    my ($name, $more_headers, $i) = @_;

    if (ref $more_headers eq 'ARRAY') {
        my $h = $more_headers->[$i];
        bail_out("$name - --- more_headers lacks data for request $i")
            unless defined $h;
        return parse_more_headers($h);
    }

    return parse_more_headers($more_headers);
}

# Returns a list of requests; each request is a list of packets
# ({ value => bytes, delay_before => secs }) sent on one connection.
sub get_req_from_block ($) {
    my $block = shift;
    my $name = $block->name;
    my @reqs;

    if (defined(my $raw = $block->raw_request)) {
        if (ref $raw eq 'ARRAY') {
            push @reqs, [map { ref $_ ? $_ : { value => $_ } } @$raw];
        } else {
            push @reqs, [{ value => $raw }];
        }
        return \@reqs;
    }

    my $request;
    if (defined $block->request_eval) {
        $request = eval "package main; " . $block->request_eval;
        warn $@ if $@;

    } else {
        $request = $block->request;
        if (defined $request && !ref $request) {
            1 while $request =~ s/^\s*\#[^\n]+\s+|^\s+//gs;
        }
    }

    my $more_headers = $block->more_headers // '';

    if (defined(my $pipe = $block->pipelined_requests)) {
        bail_out("$name - invalid entries in --- pipelined_requests")
            unless ref $pipe eq 'ARRAY';
        my $all = '';
        for my $i (0 .. $#$pipe) {
            my ($hdr, $chunked) = headers_for($name, $more_headers, $i);
            my $conn = $i == $#$pipe ? 'close' : 'keep-alive';
            $all .= build_request($name, [$pipe->[$i]], $hdr, $chunked,
                                  $conn)->[0];
        }
        return [[{ value => $all }]];
    }

    bail_out("$name - request empty") unless defined $request;

    my @list = ref $request eq 'ARRAY' ? @$request : ($request);
    if (ref $request && ref $request ne 'ARRAY') {
        bail_out("$name - invalid --- request: MUST be string or array");
    }

    for my $i (0 .. $#list) {
        my $one = $list[$i];
        my ($hdr, $chunked) = headers_for($name, $more_headers, $i);

        if (!ref $one) {
            push @reqs, [{ value => build_request($name, [$one], $hdr,
                                                  $chunked, 'close')->[0] }];
            next;
        }

        bail_out("$name - Invalid syntax: request $i should be a string "
                 . "or an array of packets") unless ref $one eq 'ARRAY';

        my @orig = map {
            ref $_ eq 'HASH' ? { %$_ } : { value => $_ }
        } @$one;
        my $out = build_request($name, [map { $_->{value} } @orig], $hdr,
                                $chunked, 'close');
        for my $k (0 .. $#orig) {
            $orig[$k]{value} = $out->[$k] // '';
        }
        push @reqs, \@orig;
    }

    return \@reqs;
}

sub connect_to_server ($$) {
    my ($block, $timeout) = @_;
    my $name = $block->name;
    my $addr = $block->server_addr_for_client // $ServerAddr;

    for my $try (1 .. 50) {
        my $sock = IO::Socket::INET->new(PeerAddr => $addr,
                                         PeerPort => $ServerPortForClient,
                                         Proto => 'tcp',
                                         Timeout => $timeout);
        return $sock if $sock;

        my $err = $!;
        my $child = $Test::Nginx::Util::ChildPid;
        if (defined $child && waitpid($child, WNOHANG) == $child) {
            undef $Test::Nginx::Util::ChildPid;
            Test::More::fail("$name - nginx exited; cannot connect to "
                             . "$addr:$ServerPortForClient: $err");
            return undef;
        }

        my $wait = (sleep_time() + sleep_time() * $try) * $try / 2;
        $wait = 1 if $wait > 1;
        sleep $wait;
    }

    Test::More::fail("$name - Can't connect to $addr:$ServerPortForClient:"
                     . " $! (aborted)");
    return undef;
}

# Send the packets on a fresh connection and read until the server
# closes it or nothing arrives for $timeout seconds.
sub send_request ($$$$) {
    my ($packets, $middle_delay, $timeout, $block) = @_;
    my $name = $block->name;

    # the server may close before it has read everything we send
    local $SIG{PIPE} = 'IGNORE';

    my $all = join '', map { $_->{value} } @$packets;
    my $head_req = $all =~ /^\s*HEAD\s+/ ? 1 : 0;

    my $sock = connect_to_server($block, $timeout) or return ('', $head_req);
    $sock->blocking(0);

    my @todo = @$packets;
    my $buf = (shift @todo)->{value};
    my $resp = '';
    my $writing = 1;
    my $sel = IO::Select->new($sock);

    while (1) {
        my ($r, $w) = IO::Select->select($sel, $writing ? $sel : undef,
                                         undef, $timeout);

        if (!$r && !$w) {
            next if $! == EINTR;
            close $sock;
            if (!defined $block->abort) {
                Test::More::fail("ERROR: client socket timed out - $name\n");
            }
            last;
        }

        if ($w && @$w) {
            if (length $buf) {
                my $n = syswrite $sock, $buf;
                if (!defined $n) {
                    if ($! != EAGAIN && $! != EINTR) {
                        warn "$name - write failed: $!\n";
                        $writing = 0;
                    }

                } else {
                    substr($buf, 0, $n) = '';
                }
            }

            if (!length $buf) {
                if (@todo) {
                    my $next = shift @todo;
                    my $delay = $next->{delay_before} // $middle_delay;
                    sleep $delay if $delay;
                    $buf = $next->{value};

                } else {
                    $writing = 0;
                    if (defined(my $how = $block->shutdown)) {
                        $how = 1 if $how =~ /^\s*$/;
                        shutdown $sock, $how;
                    }
                }
            }
        }

        if ($r && @$r) {
            my $n = sysread $sock, my $chunk, 65536;
            if (!defined $n) {
                next if $! == EAGAIN || $! == EINTR;
                warn "WARNING: $name - HTTP response read failure: $!\n";
                last;
            }
            last if $n == 0;
            $resp .= $chunk;
        }
    }

    close $sock;
    return ($resp, $head_req);
}

# ---- responses ------------------------------------------------------------

sub parse_response ($$$) {
    my ($name, $raw, $head_req) = @_;
    my $left;

    my $raw_headers = $raw =~ /(.*?\r\n)\r\n/s ? $1 : '';
    my $res = HTTP::Response->parse($raw);
    my $code = $res->code;

    if (defined $code && $code !~ /^\d+$/) {
        undef $code;
        $res->code(undef);
    }

    if ($head_req || ($code && ($code == 304 || $code == 204
                                || $code == 101)))
    {
        $left = $res->content;
        $res->content('');
        return ($res, $raw_headers, $left);
    }

    my $enc = $res->header('Transfer-Encoding');
    my $len = $res->header('Content-Length');

    if (defined $enc && $enc eq 'chunked') {
        my $data = $res->content // '';
        my $decoded = '';
        pos($data) = 0;

        while (1) {
            if ($data =~ /\G0[ \t]*(?:;[^\r\n]*)?\r\n\r\n/gc) {
                $left = substr $data, pos($data) if pos($data) < length $data;
                last;
            }

            if ($data =~ /\G[ \t]*([0-9A-Fa-f]+)[ \t]*(?:;[^\r\n]*)?\r\n/gc)
            {
                my $size = hex $1;
                if (length($data) - pos($data) < $size) {
                    Test::More::fail("$name - invalid chunked data received"
                                     . " (not enough octets for the data)");
                    return;
                }
                $decoded .= substr $data, pos($data), $size;
                pos($data) += $size;
                if ($data !~ /\G\r\n/gc) {
                    Test::More::fail("$name - invalid chunked data "
                                     . "received (expected CRLF).");
                    return;
                }
                next;
            }

            if ($data =~ /\G(.+)/gcs) {
                Test::More::fail("$name - invalid chunked body received: "
                                 . show_all_chars(substr $1, 0, 80));
            } else {
                Test::More::fail("$name - no last chunk found - "
                                 . show_all_chars($data));
            }
            return;
        }

        $res->content($decoded);

    } elsif (defined $len && $len =~ /^\d+$/) {
        my $data = $res->content // '';
        if (length $data < $len) {
            warn "WARNING: $name - response body truncated: $len expected,"
                 . " but got " . length($data) . "\n";

        } elsif (length $data > $len) {
            $left = substr $data, $len;
            $res->content(substr $data, 0, $len);
        }
    }

    return ($res, $raw_headers, $left);
}

sub get_indexed_value ($$$$) {
    my ($name, $value, $idx, $need_array) = @_;

    if ($need_array) {
        return $value->[$idx] if ref $value eq 'ARRAY';
        bail_out("$name - You asked for many requests, the expected "
                 . "results should be arrays as well.");
    }

    return ref $value eq 'ARRAY' ? $value->[0] : $value;
}

sub run_test_helper ($$$) {
    my ($block, $dry_run, $rep) = @_;
    my $name = $block->name;

    my $reqs = get_req_from_block($block);
    bail_out("$name - request empty") unless @$reqs;

    my $timeout = parse_time($block->timeout) // timeout();
    my $pipelined = $block->pipelined_requests;
    my $per_conn = $pipelined ? scalar @$pipelined : 1;
    my $need_array = $pipelined ? 1 : @$reqs > 1;
    my $req_idx = 0;
    my $res;

    for my $k (0 .. $#$reqs) {
        my ($raw, $head_req) = send_request($reqs->[$k],
                                            $block->raw_request_middle_delay,
                                            $timeout, $block);
        my $left = $raw // '';

        for my $j (1 .. $per_conn) {
            if (!defined $block->ignore_response) {
                my $raw_headers;
                ($res, $raw_headers, $left) = parse_response($name,
                                                    $left // '', $head_req);

                if ($j == $per_conn && defined $left && length $left) {
                    warn "WARNING: $name - unexpected extra bytes after "
                         . "the response: \"" . show_all_chars($left)
                         . "\"\n";
                }

                check_error_code($block, $res, $req_idx, $need_array);
                check_raw_response_headers($block, $raw_headers, $req_idx,
                                           $need_array);
                check_response_headers($block, $res, $raw_headers,
                                       $req_idx, $need_array);
                transform_response_body($block, $res, $req_idx);
                check_response_body($block, $res, $req_idx, $rep,
                                    $need_array);
            }

            if ($j < $per_conn || $k < $#$reqs) {
                sleep parse_time($block->wait) if $block->wait;
                check_error_log($block, $res, 0, $rep, $need_array);
                check_access_log($block, $rep)
                    unless defined $block->ignore_response;
            }

            $req_idx++;
        }
    }

    sleep parse_time($block->wait) if $block->wait;
    check_error_log($block, $res, 0, $rep, $need_array);
    check_access_log($block, $rep) unless defined $block->ignore_response;
}

sub check_error_code ($$$$) {
    my ($block, $res, $idx, $need_array) = @_;
    my $name = $block->name;
    my $code = ($res && $res->code) || '';

    if (defined $block->error_code_like) {
        my $pat = get_indexed_value($name, $block->error_code_like, $idx,
                                    $need_array);
        Test::More::like($code, qr/$pat/sm, "$name - status code ok");

    } elsif (defined $block->error_code) {
        Test::More::is($code, get_indexed_value($name, $block->error_code,
                                                $idx, $need_array),
                       "$name - status code ok");

    } else {
        Test::More::is($code, 200, "$name - status code ok");
    }
}

sub check_raw_response_headers ($$$$) {
    my ($block, $raw_headers, $idx, $need_array) = @_;
    my $name = $block->name;

    if (defined $block->raw_response_headers_like) {
        my $pat = get_indexed_value($name, $block->raw_response_headers_like,
                                    $idx, $need_array);
        Test::More::like($raw_headers, qr/$pat/s,
                         "$name - raw resp headers like");
    }

    if (defined $block->raw_response_headers_unlike) {
        my $pat = get_indexed_value($name,
                                    $block->raw_response_headers_unlike,
                                    $idx, $need_array);
        Test::More::unlike($raw_headers, qr/$pat/s,
                           "$name - raw resp headers unlike");
    }
}

sub check_response_headers ($$$$$) {
    my ($block, $res, $raw_headers, $idx, $need_array) = @_;
    my $name = $block->name;

    if (defined $block->response_headers) {
        my $headers = parse_headers(get_indexed_value($name,
                            $block->response_headers, $idx, $need_array));

        for my $key (sort keys %$headers) {
            my $val = $headers->{$key};
            if (!defined $val) {
                Test::More::unlike($raw_headers // '',
                                   qr/^\s*\Q$key\E\s*:/ms,
                                   "$name - header $key not present in the "
                                   . "raw headers");
                next;
            }
            $val =~ s/\$ServerPort\b/$ServerPort/g;
            $val =~ s/\$ServerPortForClient\b/$ServerPortForClient/g;
            my $got = $res ? $res->header($key) : undef;
            Test::More::is($got // '', $val, "$name - header $key ok");
        }

    } elsif (defined $block->response_headers_like) {
        my $headers = parse_headers(get_indexed_value($name,
                        $block->response_headers_like, $idx, $need_array));

        for my $key (sort keys %$headers) {
            my $val = $headers->{$key} // '';
            my $got = $res ? $res->header($key) : undef;
            Test::More::like($got // '', qr/^$val$/,
                             "$name - header $key like ok");
        }
    }
}

sub run_body_filter ($$$) {
    my ($block, $filter, $content) = @_;
    my $name = $block->name;

    return $filter->($content) if ref $filter eq 'CODE';

    bail_out("$name - response_body_filters only takes code refs and "
             . "filter names") if ref $filter;

    my %named = (
        md5_hex  => sub { require Digest::MD5; Digest::MD5::md5_hex($_[0]) },
        sha1_hex => sub { require Digest::SHA; Digest::SHA::sha1_hex($_[0]) },
        uc       => sub { uc $_[0] },
        lc       => sub { lc $_[0] },
        ucfirst  => sub { ucfirst $_[0] },
        lcfirst  => sub { lcfirst $_[0] },
        length   => sub { length $_[0] },
    );

    my $f = $named{$filter}
        or bail_out("$name - unknown filter \"$filter\" in the "
                    . "--- response_body_filters section");
    return $f->($content);
}

sub transform_response_body ($$$) {
    my ($block, $res, $idx) = @_;
    my $filters = $block->response_body_filters;

    return unless defined $res && defined $filters;
    my $content = $res->content;
    return unless defined $content;

    if (!ref $filters) {
        $filters =~ s/^\s+|\s+$//gs;
        $filters = [split /\s+/, $filters];

    } elsif (ref $filters ne 'ARRAY') {
        $filters = [$filters];
    }

    if (ref $filters->[0] eq 'ARRAY') {
        $filters = $filters->[$idx]
            or bail_out($block->name . " - response_body_filters has no "
                        . "entry for request $idx");
    }

    for my $f (@$filters) {
        $content = run_body_filter($block, $f, $content);
    }

    $res->content($content);
}

sub check_response_body ($$$$$) {
    my ($block, $res, $idx, $rep, $need_array) = @_;
    my $name = $block->name;
    my $content = $res ? $res->content : undef;

    if (defined $block->response_body || defined $block->response_body_eval) {
        my $expected;

        if (defined $block->response_body_eval) {
            $expected = eval "package main; " . get_indexed_value($name,
                            $block->response_body_eval, $idx, $need_array);
            warn $@ if $@;

        } else {
            $expected = get_indexed_value($name, $block->response_body, $idx,
                                          $need_array);
        }

        if ($block->charset && defined $expected) {
            Encode::from_to($expected, 'UTF-8', $block->charset);
        }

        if (defined $expected && !ref $expected) {
            $expected =~ s/\$ServerPort\b/$ServerPort/g;
            $expected =~ s/\$ServerPortForClient\b/$ServerPortForClient/g;
        }

        my $desc = "$name - response_body - response is expected "
                   . "(repeated req $rep, req $idx)";

        if (ref $expected) {
            Test::More::like($content, $expected,
                             "$name - response_body - like (repeated req "
                             . "$rep, req $idx)");

        } elsif ($NoLongString) {
            Test::More::is($content, $expected, $desc);

        } else {
            is_string($content, $expected, $desc);
        }

    } elsif (defined $block->response_body_like
             || defined $block->response_body_unlike)
    {
        my ($pats, $type, $cmp) = defined $block->response_body_like
            ? ($block->response_body_like, 'like', \&Test::More::like)
            : ($block->response_body_unlike, 'unlike', \&Test::More::unlike);

        my $pat = get_indexed_value($name, $pats, $idx, $need_array);
        $pat =~ s/\$ServerPort\b/$ServerPort/g;
        $pat =~ s/\$ServerPortForClient\b/$ServerPortForClient/g;
        my $summary = trim($content) // '';

        $cmp->($content, qr/$pat/s,
               "$name - response_body_$type - response is expected "
               . "($summary)");
    }

    for my $check (@ResponseBodyChecks) {
        $check->($block, $res ? $res->content : undef, $idx, $rep, 0);
    }
}

# ---- logs -----------------------------------------------------------------

sub fmt_str ($) {
    my $s = shift;
    chomp $s;
    $s =~ s/"/\\"/g;
    $s =~ s/\r/\\r/g;
    $s =~ s/\n/\\n/g;
    return $s;
}

# string -> one pattern per line; Regexp -> [it]; ARRAY -> copy
sub pattern_list ($) {
    my $pats = shift;

    if (!ref $pats) {
        chomp $pats;
        return [split /\n+/, $pats];
    }

    return [$pats] if ref $pats eq 'Regexp';
    return [@$pats];
}

sub line_matches ($$) {
    my ($line, $pat) = @_;
    return ref $pat ? $line =~ /$pat/ : index($line, $pat) >= 0;
}

sub value_contains ($$) {
    my ($val, $needle) = @_;
    return 0 unless defined $val;
    return scalar grep { !ref $_ && index($_, $needle) >= 0 }
                       (ref $val eq 'ARRAY' ? @$val : ($val));
}

# "must match" patterns: one pass/fail per pattern
sub check_lines_match ($$$$) {
    my ($name, $pats, $lines, $what) = @_;

    for my $line (@$lines) {
        for my $pat (@$pats) {
            next unless defined $pat;
            if (line_matches($line, $pat)) {
                Test::More::pass("$name - pattern \"$pat\" matches a line "
                                 . "in $what");
                undef $pat;
            }
        }
    }

    for my $pat (@$pats) {
        next unless defined $pat;
        Test::More::fail("$name - pattern \"$pat\" should match a line in "
                         . "$what");
    }
}

# "must not match" patterns: a failure per matching line, else one pass
sub check_lines_no_match ($$$$) {
    my ($name, $pats, $lines, $what) = @_;
    my %found;

    for my $i (0 .. $#$lines) {
        my $line = $lines->[$i];
        for my $pat (@$pats) {
            next unless defined $pat;
            next unless line_matches($line, $pat);
            $found{$pat} = 1;
            my @more = @$lines[$i + 1 .. min($i + 9, $#$lines)];
            Test::More::fail("$name - pattern \"" . fmt_str($pat)
                             . "\" should not match any line in $what but "
                             . "matches line \"" . fmt_str($line) . "\"\n"
                             . join('', @more));
        }
    }

    for my $pat (@$pats) {
        next if !defined $pat || $found{$pat};
        Test::More::pass("$name - pattern \"" . fmt_str($pat)
                         . "\" does not match a line in $what");
    }
}

sub check_error_log ($$$$$) {
    my ($block, $res, $dry_run, $rep, $need_array) = @_;
    my $name = $block->name;
    my $lines;

    my %warn_for = ('[alert]' => 1, '[crit]' => 1, '[emerg]' => 1);

    my $grep_pat = $block->grep_error_log;
    if (defined $grep_pat) {
        $grep_pat = $grep_pat->[$rep] if ref $grep_pat eq 'ARRAY';

    } elsif (defined $block->grep_error_log_out) {
        bail_out("$name - No --- grep_error_log defined but "
                 . "--- grep_error_log_out is defined");
    }

    if (defined $grep_pat) {
        my $expected = $block->grep_error_log_out;
        bail_out("$name - No --- grep_error_log_out defined but "
                 . "--- grep_error_log is defined") unless defined $expected;
        $expected = $expected->[$rep] if ref $expected eq 'ARRAY';

        $lines //= error_log_data();
        my $matched = '';
        for my $line (@$lines) {
            if (ref $grep_pat ? $line =~ /$grep_pat/ : $line =~ /\Q$grep_pat\E/)
            {
                $matched .= "$&\n" if $& !~ /\n/;
            }
        }

        my $desc = "$name - grep_error_log_out (req $rep)";
        if (ref $expected eq 'Regexp') {
            Test::More::like($matched, $expected, $desc);
        } else {
            is_str($matched, $expected, $desc);
        }
    }

    for my $sec (qw( error_log no_error_log )) {
        my $pats = $block->$sec;
        next unless defined $pats;
        for my $w (keys %warn_for) {
            (my $prefix = $w) =~ s/\]$//;
            delete $warn_for{$w} if value_contains($pats, $prefix);
        }
        $lines //= error_log_data();
        if ($sec eq 'error_log') {
            check_lines_match($name, pattern_list($pats), $lines,
                              "error.log (req $rep)");
        } else {
            check_lines_no_match($name, pattern_list($pats), $lines,
                                 "error.log (req $rep)");
        }
    }

    $lines //= error_log_data();

    for my $line (@$lines) {
        for my $w (keys %warn_for) {
            warn "WARNING: $name - " . fmt_str($line) . "\n"
                if index($line, $w) >= 0;
        }
        if ($line =~ /\bAssertion .*?failed\b/) {
            chomp(my $l = $line);
            Test::More::fail("$name - $l");
        }
    }
}

sub check_access_log ($$) {
    my ($block, $rep) = @_;
    my $name = $block->name;

    if (defined $block->access_log) {
        check_lines_match($name, pattern_list($block->access_log),
                          access_log_data(), "access.log (req $rep)");
    }

    if (defined $block->no_access_log) {
        check_lines_no_match($name, pattern_list($block->no_access_log),
                             access_log_data(), "access.log (req $rep)");
    }
}

# Run when the block's nginx has been stopped (next block or END).
sub check_shutdown_error_log ($$) {
    my ($block, $dry_run) = @_;
    my $name = $block->name;

    return if $dry_run;

    my $lines = error_log_data();

    if (defined $block->no_shutdown_error_log) {
        check_lines_no_match($name, pattern_list($block->no_shutdown_error_log),
                             $lines, 'error.log');
    }

    if (defined $block->shutdown_error_log) {
        check_lines_match($name, pattern_list($block->shutdown_error_log),
                          $lines, 'error.log');
    }
}

# valgrind mode: every "definitely lost" record and every invalid
# memory access of the nginx that just stopped is a failure of the last
# block that ran on it (blocks without --- config share their
# predecessor's nginx).
sub check_valgrind_log ($) {
    my $block = shift;
    my $name = $block->name;
    (my $pattern = $Test::Nginx::Util::ValgrindLog) =~ s/%p/*/;
    my @records;

    for my $file (glob $pattern) {
        open my $in, '<', $file or next;
        my $cur = '';
        while (my $line = <$in>) {
            if ($line =~ /^==\d+==\s*$/) {
                push @records, $cur if $cur ne '';
                $cur = '';
                next;
            }
            $cur .= $line;
        }
        push @records, $cur if $cur ne '';
        close $in;
    }

    for my $rec (@records) {
        next unless $rec =~ /(definitely\ lost\ in\ loss\ record
                              |Invalid\ (?:read|write|free)
                              |Mismatched\ free)/x;
        my $what = $1;
        Test::More::fail("$name - valgrind: $what");
        Test::More::diag($rec);
    }
}

1;
