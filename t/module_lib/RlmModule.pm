package RlmModule;

# Helpers of the t/module_*.t suites that drive a whole nginx by hand:
# start it with a config (master process, daemon), talk HTTP to it,
# signal it, look at its processes and its error log.  Used where a test
# needs what Test::Nginx blocks cannot express: reloads, killing the
# manager, waiting for expiry.

use strict;
use warnings;

use Cwd qw( abs_path );
use File::Basename qw( dirname );
use File::Path qw( make_path remove_tree );
use IO::Socket::INET;
use JSON::PP;
use Time::HiRes qw( sleep time );

use Exporter 'import';
our @EXPORT = qw( $Root $Nginx $Module $Sandboxd start_nginx stop_nginx
                  valgrind_check
                  http json_http master_pid manager_pids worker_pids
                  wait_until
                  error_log signal_nginx sandboxd_pid );

our $Root = abs_path(dirname(__FILE__) . '/../..');
our $Nginx = $ENV{TEST_NGINX_BINARY} || '/usr/sbin/nginx';
our $Build = $ENV{RLM_BUILD} || "$Root/build";
our $Module = "$Build/ngx_http_rlm_module.so";
our $Sandboxd = $ENV{RLM_SANDBOXD} || "$Build/bin/rlm-sandboxd";

my $json = JSON::PP->new->allow_nonref;

my ($Dir, $Port);
our $Valgrind;

# start_nginx($dir, $port, $http_block_body, $server_body, %opt)
sub start_nginx {
    my ($dir, $port, $http, $server, %opt) = @_;

    ($Dir, $Port) = ($dir, $port);

    make_path("$dir/logs", "$dir/conf");

    my $main = $opt{main} // "worker_processes 2;";
    my $user = $> == 0 ? "user root;" : "";

    # under make asan-test: nginx hands a new binary (USR2) only the
    # variables "env" names, and the ASan build of the module needs the
    # runtime preloaded in it as in the first one
    if (($ENV{LD_PRELOAD} // '') =~ /libasan/) {
        $main .= "\nenv LD_PRELOAD;\nenv ASAN_OPTIONS;\nenv UBSAN_OPTIONS;";
    }

    write_conf($dir, <<"CONF");
load_module $Module;
$user
$main
error_log $dir/logs/error.log info;
pid $dir/logs/nginx.pid;
events { worker_connections 256; }
http {
    access_log $dir/logs/access.log;
    client_body_temp_path $dir/body;
$http
    server {
        listen 127.0.0.1:$port;
$server
    }
}
CONF

    if ($ENV{TEST_NGINX_USE_VALGRIND}) {
        # foreground under memcheck; workers are forks and stay traced,
        # the exec'd manager is not (it is not nginx)
        my $pid = fork // die "fork: $!";
        if ($pid == 0) {
            open STDOUT, '>', "$dir/logs/stdout.log";
            open STDERR, '>&', \*STDOUT;
            exec 'valgrind', '--tool=memcheck', '--leak-check=full',
                 '--show-possibly-lost=no', '--num-callers=30',
                 "--suppressions=$Root/t/valgrind.suppress",
                 "--log-file=$dir/logs/valgrind.%p.log",
                 $Nginx, '-p', "$dir/", '-c', "$dir/conf/nginx.conf",
                 '-g', 'daemon off;';
            exit 127;
        }
        $Valgrind = $pid;
        my $up = wait_until(sub { -s "$dir/logs/nginx.pid" }, 60);
        return ($up, $up ? '' : 'nginx under valgrind did not start');
    }

    my $out = `$Nginx -p $dir/ -c $dir/conf/nginx.conf 2>&1`;
    return ($? == 0, $out);
}


# after stop_nginx under valgrind: one test per process log, failing on
# definitely lost blocks and invalid accesses
sub valgrind_check {
    return unless $Valgrind;
    require Test::More;
    for my $log (glob "$Dir/logs/valgrind.*.log") {
        open my $fh, '<', $log or next;
        local $/;
        my $text = <$fh>;
        close $fh;
        my @bad;
        push @bad, $1 while $text =~ /(==\d+== (?:Invalid|Mismatched|Conditional jump|Syscall param)[^\n]*\n(?:==\d+==  [^\n]*\n)*)/g;
        push @bad, $1 while $text =~ /(==\d+== [\d,]+ (?:\([\d,]+ direct, [\d,]+ indirect\) )?bytes in [\d,]+ blocks are definitely lost[^\n]*\n(?:==\d+==  [^\n]*\n)*)/g;
        Test::More::ok(!@bad, "valgrind: $log clean")
            or Test::More::diag(join "\n", @bad[0 .. ($#bad > 4 ? 4 : $#bad)]);
    }
    $Valgrind = undef;
}

sub write_conf {
    my ($dir, $text) = @_;
    open my $fh, '>', "$dir/conf/nginx.conf" or die $!;
    print $fh $text;
    close $fh;
}

sub master_pid {
    open my $fh, '<', "$Dir/logs/nginx.pid" or return undef;
    my $pid = <$fh>;
    close $fh;
    chomp $pid if defined $pid;
    return $pid;
}

sub signal_nginx {
    my ($sig) = @_;
    my $pid = master_pid() or return 0;
    return kill $sig, $pid;
}

sub stop_nginx {
    my $pid = master_pid() or return;
    kill 'QUIT', $pid;
    wait_until(sub { !kill 0, $pid }, $Valgrind ? 120 : 10);
    if ($Valgrind) {
        waitpid($Valgrind, 0);
        valgrind_check();
    }
    unlink "$Dir/logs/nginx.pid";
}

# the master's children, pid => command line
sub master_children {
    my $master = master_pid() or return ();
    my %kids;

    for my $stat (glob "/proc/[0-9]*/stat") {
        open my $fh, '<', $stat or next;
        my $line = <$fh> // '';
        close $fh;
        my ($pid, $ppid) = $line =~ /^(\d+) \(.*\) \S (\d+)/ or next;
        next unless $ppid == $master;
        open my $cf, '<', "/proc/$pid/cmdline" or next;
        $kids{$pid} = <$cf> // '';
        close $cf;
    }

    return %kids;
}

# children of the master that run rlm-sandboxd (its pool sandboxes are
# grandchildren)
sub manager_pids {
    my %kids = master_children();
    return grep { $kids{$_} =~ /rlm-sandboxd/ } keys %kids;
}

# the other children: the workers, those shutting down included (under
# valgrind they do not show their title)
sub worker_pids {
    my %kids = master_children();
    return grep { $kids{$_} !~ /rlm-sandboxd/ } keys %kids;
}

sub sandboxd_pid {
    my @p = manager_pids();
    return @p == 1 ? $p[0] : undef;
}

sub wait_until {
    my ($cond, $secs) = @_;
    my $end = time + ($secs // 10);
    while (time < $end) {
        my $v = $cond->();
        return $v if $v;
        sleep 0.1;
    }
    return $cond->();
}

# raw HTTP/1.0 so the response ends with the connection
sub http {
    my ($method, $path, $body, %headers) = @_;

    my $sock = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$Port",
                                     Timeout => 30)
        or return (0, {}, "connect: $!");

    $body //= '';
    $headers{'Content-Type'} //= 'application/json' if length $body;

    my $req = "$method $path HTTP/1.0\r\nHost: localhost\r\n";
    $req .= "$_: $headers{$_}\r\n" for sort keys %headers;
    $req .= "Content-Length: " . length($body) . "\r\n" if length $body;
    $req .= "\r\n$body";

    print $sock $req;

    local $/;
    my $resp = <$sock> // '';
    close $sock;

    my ($head, $rbody) = split /\r\n\r\n/, $resp, 2;
    $head //= '';
    my ($status) = $head =~ m{^HTTP/\S+ (\d+)};
    my %h;
    for (split /\r\n/, $head) {
        $h{lc $1} = $2 if /^([^:]+):\s*(.*)$/;
    }

    return ($status // 0, \%h, $rbody // '');
}

sub json_http {
    my ($status, $h, $body) = http(@_);
    my $doc = eval { $json->decode($body) };
    return ($status, $doc // {}, $h, $body);
}

sub error_log {
    open my $fh, '<', "$Dir/logs/error.log" or return '';
    local $/;
    my $text = <$fh>;
    close $fh;
    return $text;
}

1;
