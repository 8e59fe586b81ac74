package Test::Nginx::Util;

# Server management for our Test::Nginx-compatible runner: settings,
# server root layout, nginx.conf generation, starting/stopping nginx
# (optionally under valgrind) and reading the logs a block produced.
#
# The request/response side lives in Test::Nginx::Socket.  Names and
# semantics follow the CPAN Test::Nginx so .t files run under both.

use strict;
use warnings;

our $VERSION = '0.29_rlm';

# defined by this runner only, not by the CPAN Test::Nginx: what a file
# that checks this runner's own behaviour (t/harness/negative.t) or a
# suite that must know looks for
our $RlmRunner = 1;

use base 'Exporter';

use Carp qw( croak );
use Cwd qw( cwd );
use File::Path qw( make_path remove_tree );
use File::Spec ();
use IO::Socket::INET ();
use List::Util qw( shuffle );
use POSIX qw( SIGQUIT SIGKILL SIGTERM WNOHANG );
use Test::LongString;
use Time::HiRes qw( sleep time );

our @EXPORT = qw(
    env_to_nginx is_str no_long_string $NoLongString
    $ServerAddr server_addr $ServerName server_name
    server_port server_port_for_client $ServerPort $ServerPortForClient
    server_root html_dir $ServRoot $ConfFile $PidFile $ErrLogFile
    parse_time trim show_all_chars parse_headers expand_env_in_text
    bail_out add_cleanup_handler add_block_preprocessor
    error_log_data access_log_data sleep_time verbose
    repeat_each $RepeatEach workers worker_connections
    master_on master_off master_process_enabled log_level
    no_shuffle no_root_location config_preamble timeout
    check_accum_error_log no_nginx_manager
    run_tests $RunTestHelper $CheckErrorLog $CheckShutdownErrorLog
    $NginxVersion get_nginx_version get_canon_version is_running
);

# ---- settings (environment first, then the .t file's calls) ----------

our $Verbose          = $ENV{TEST_NGINX_VERBOSE};
our $NginxBinary      = $ENV{TEST_NGINX_BINARY} || '/usr/sbin/nginx';
our $LoadModules      = $ENV{TEST_NGINX_LOAD_MODULES};
our $UseValgrind      = $ENV{TEST_NGINX_USE_VALGRIND};
our $NoShuffle        = $ENV{TEST_NGINX_NO_SHUFFLE} || 0;
our $Timeout          = $ENV{TEST_NGINX_TIMEOUT} || 3;
our $LogLevel         = $ENV{TEST_NGINX_LOG_LEVEL} || 'debug';
our $MasterProcessEnabled = $ENV{TEST_NGINX_MASTER_PROCESS} || 'off';
our $DaemonEnabled    = 'on';
our $Workers          = 1;
our $WorkerConnections = 64;
our $TestNginxSleep   = $ENV{TEST_NGINX_SLEEP} || 0.015;
our $CheckAccumErrLog = $ENV{TEST_NGINX_CHECK_ACCUM_ERR_LOG};
our $NoNginxManager   = $ENV{TEST_NGINX_NO_NGINX_MANAGER} || 0;
our $Randomize        = $ENV{TEST_NGINX_RANDOMIZE};
our $NoLongString;
our $NoRootLocation   = 0;
our $ConfigPreamble   = '';
our $RepeatEach       = 1;
our $ServerAddr       = '127.0.0.1';
our $ServerName       = 'localhost';
our @EnvToNginx;
our @BlockPreprocessors;
our @CleanupHandlers;

our $ServerPort = $ENV{TEST_NGINX_SERVER_PORT} || $ENV{TEST_NGINX_PORT}
                  || 1984;

if ($Randomize) {
    $ServerPort = pick_free_port({})
        or die "cannot find a free port for TEST_NGINX_RANDOMIZE\n";
}

our $ServerPortForClient = $ENV{TEST_NGINX_CLIENT_PORT} || $ServerPort;

# valgrind needs nginx in the foreground so we can wait for its exit
if ($UseValgrind) {
    $DaemonEnabled = 'off';
}

# Several .t files may run at once with different ports; give each port
# its own server root unless the user chose one.
our $ServRoot;
if ($ENV{TEST_NGINX_SERVROOT}) {
    $ServRoot = File::Spec->rel2abs($ENV{TEST_NGINX_SERVROOT});

} elsif ($Randomize || $ServerPort != 1984) {
    $ServRoot = File::Spec->rel2abs("t/servroot_$ServerPort");

} else {
    $ServRoot = File::Spec->rel2abs('t/servroot');
}
$ENV{TEST_NGINX_SERVER_ROOT} = $ServRoot;

our $LogDir     = File::Spec->catfile($ServRoot, 'logs');
our $ErrLogFile = File::Spec->catfile($LogDir, 'error.log');
our $AccLogFile = File::Spec->catfile($LogDir, 'access.log');
our $HtmlDir    = File::Spec->catfile($ServRoot, 'html');
our $ConfDir    = File::Spec->catfile($ServRoot, 'conf');
our $ConfFile   = File::Spec->catfile($ConfDir, 'nginx.conf');
our $PidFile    = File::Spec->catfile($LogDir, 'nginx.pid');
our $CacheDir   = File::Spec->catfile($ServRoot, 'cache');
# one file per process (%p): with master_on the workers write their own
our $ValgrindLog = File::Spec->catfile($LogDir, 'valgrind.%p.log');

our ($RunTestHelper, $CheckErrorLog, $CheckShutdownErrorLog);
our $FilterHttpConfig;
our $NginxVersion;
our $ErrLogFilePos = 0;
our $PrevBlock;
our $PrevConfig;
our $ChildPid;          # nginx run in the foreground (valgrind mode)
our $InSubprocess;
our $FirstTime = 1;

# ---- small setters/getters with the CPAN names ------------------------

sub no_long_string () { $NoLongString = 1 }
sub no_shuffle ()     { $NoShuffle = 1 }
sub no_root_location () { $NoRootLocation = 1 }
sub no_nginx_manager () { $NoNginxManager = 1 }
sub check_accum_error_log () { $CheckAccumErrLog = 1 }
sub master_on ()      { $MasterProcessEnabled = 'on' }
sub master_off ()     { $MasterProcessEnabled = 'off' }
sub config_preamble ($) { $ConfigPreamble = shift }
sub sleep_time ()     { $TestNginxSleep }
sub verbose ()        { $Verbose }
sub server_root ()    { $ServRoot }
sub html_dir ()       { $HtmlDir }

sub master_process_enabled (@) {
    if (@_) {
        $MasterProcessEnabled = shift() ? 'on' : 'off';
        return;
    }
    return $MasterProcessEnabled;
}

sub getset {
    my ($ref, @args) = @_;
    if (@args) {
        $$ref = $args[0];
        return;
    }
    return $$ref;
}

sub repeat_each (@)        { getset(\$RepeatEach, @_) // $RepeatEach }
sub workers (@)            { getset(\$Workers, @_) }
sub worker_connections (@) { getset(\$WorkerConnections, @_) }
sub log_level (@)          { getset(\$LogLevel, @_) }
sub timeout (@)            { getset(\$Timeout, @_) }
sub server_addr (@)        { getset(\$ServerAddr, @_) }
sub server_name (@)        { getset(\$ServerName, @_) }

sub server_port (@) {
    if (@_) {
        $ServerPort = shift;
        $ServerPortForClient = $ServerPort;
        return;
    }
    return $ServerPort;
}

sub server_port_for_client (@) { getset(\$ServerPortForClient, @_) }

sub env_to_nginx (@) {
    croak "env_to_nginx: no arguments specified" unless @_;
    for my $v (@_) {
        if ($v !~ /^[A-Za-z_]/ || $v =~ /\n/) {
            croak "env_to_nginx: bad argument value: $v";
        }
        push @EnvToNginx, $v;
    }
}

sub add_block_preprocessor (&) {
    unshift @BlockPreprocessors, shift;
}

sub add_cleanup_handler ($) {
    unshift @CleanupHandlers, shift;
}

sub is_str (@) {
    my ($got, $expected, $desc) = @_;

    if (ref $expected && ref $expected eq 'Regexp') {
        return Test::More::like($got, $expected, $desc);
    }

    if ($NoLongString) {
        return Test::More::is($got, $expected, $desc);
    }

    return is_string($got, $expected, $desc);
}

sub bail_out (@) {
    cleanup();
    Test::More::BAIL_OUT(join '', @_);
}

# ---- text helpers -------------------------------------------------------

# "1.5", "500ms", "2s" -> seconds
sub parse_time ($) {
    my $tm = shift;
    return undef unless defined $tm;
    if ($tm =~ s/([^_a-zA-Z])ms$/$1/) {
        $tm = $tm / 1000;

    } else {
        $tm =~ s/([^_a-zA-Z])s$/$1/;
    }
    return $tm;
}

sub trim ($) {
    my $s = shift;
    return undef unless defined $s;
    $s =~ s/^\s+|\s+$//g;
    $s =~ s/\n/ /gs;
    $s =~ s/\s{2,}/ /gs;
    return $s;
}

sub show_all_chars ($) {
    my $s = shift;
    $s =~ s/\n/\\n/gs;
    $s =~ s/\r/\\r/gs;
    $s =~ s/\t/\\t/gs;
    return $s;
}

# "Name: value" lines; "!Name" means the header must be absent (undef)
sub parse_headers ($) {
    my $text = shift;
    my %headers;

    for my $line (split /\n/, $text // '') {
        $line =~ s/^\s+|\s+$//g;
        next if $line eq '';
        if ($line =~ s/^!\s*//) {
            $headers{$line} = undef;
            next;
        }
        my ($key, $val) = split /\s*:\s*/, $line, 2;
        $headers{$key} = $val // '';
    }

    return \%headers;
}

sub pick_free_port {
    my ($used) = @_;

    for (1 .. 1000) {
        my $port = 1985 + int rand(63000);
        next if $used->{$port};
        my $sock = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
                                         LocalPort => $port,
                                         Proto => 'tcp');
        if ($sock) {
            close $sock;
            return $port;
        }
    }

    return undef;
}

# Replace $TEST_NGINX_FOO with the environment value; an undefined
# variable is a hard error, as in the CPAN module.
sub expand_env_in_text ($$$) {
    my ($text, $name, $rand_ports) = @_;

    return undef unless defined $text;

    $text =~ s{\$(TEST_NGINX_[_A-Z0-9]+)}{
        my $var = $1;
        my $val;
        if ($var =~ /^TEST_NGINX_RAND_PORT_[0-9]+$/) {
            # pick before assigning: `//=` would create the key as undef
            # first and the port list below would see it
            $val = $rand_ports->{$var} // pick_free_port({
                $ServerPort => 1,
                map { $_ => 1 } grep { defined } values %$rand_ports
            });
            $rand_ports->{$var} = $val;
            bail_out("$name - no free port for $var") unless defined $val;

        } else {
            bail_out("$name - No environment $var defined.\n")
                unless defined $ENV{$var};
            $val = $ENV{$var};
        }
        $val;
    }ge;

    return $text;
}

# ---- processes ------------------------------------------------------------

# "daemon on" makes nginx an orphan.  Where PID 1 never reaps (many
# containers) every block would leave a zombie behind, so become a child
# subreaper: orphans of ours are re-parented to us and we reap them.
sub become_subreaper () {
    return unless $^O eq 'linux';
    require Config;
    my %sys_prctl = (x86_64 => 157, aarch64 => 167);
    my ($arch) = $Config::Config{archname} =~ /^(x86_64|aarch64)/;
    return unless $arch;
    # PR_SET_CHILD_SUBREAPER = 36
    syscall($sys_prctl{$arch}, 36, 1, 0, 0, 0);
}

become_subreaper();

# kill(0) is true for zombies too, so reap our own and look at the
# process state of others.
sub is_running ($) {
    my $pid = shift;

    return 0 unless $pid;
    return 0 if waitpid($pid, WNOHANG) == $pid;
    return 0 unless kill(0, $pid);

    if (open my $in, '<', "/proc/$pid/stat") {
        my $stat = <$in> // '';
        close $in;
        return 0 if $stat =~ /^\d+ \(.*\) [ZX] /s;
    }

    return 1;
}

sub read_pid_file () {
    open my $in, '<', $PidFile or return undef;
    my $pid = do { local $/; <$in> } // '';
    close $in;
    $pid =~ s/\s+//g;
    return $pid =~ /^\d+$/ ? $pid : undef;
}

sub looks_like_nginx ($) {
    my $pid = shift;
    open my $in, '<', "/proc/$pid/cmdline" or return 1;   # not Linux
    my $cmd = do { local $/; <$in> } // '';
    close $in;
    return $cmd =~ /nginx/;
}

sub wait_gone ($$) {
    my ($pid, $secs) = @_;
    my $deadline = time + $secs;

    while (time < $deadline) {
        if (defined $ChildPid && $pid == $ChildPid) {
            return 1 if waitpid($pid, WNOHANG) == $pid;
        }
        return 1 unless is_running($pid);
        sleep 0.01;
    }

    return 0;
}

# Stop the nginx we started, gracefully first.
sub stop_nginx ($) {
    my $name = shift;

    my $pid = $ChildPid // read_pid_file();
    return unless defined $pid;

    # a stale pid file may name a process that is not ours any more
    if (!defined $ChildPid && !looks_like_nginx($pid)) {
        unlink $PidFile;
        return;
    }

    if (is_running($pid)) {
        kill SIGQUIT, $pid;
        # under valgrind the leak check at exit takes a while
        if (!wait_gone($pid, $UseValgrind ? 60 : $Timeout)) {
            warn "$name - nginx $pid did not quit in time, killing it\n";
            kill SIGKILL, $pid;
            wait_gone($pid, 5);
        }
    }

    if (defined $ChildPid) {
        waitpid($ChildPid, 0) if $ChildPid == $pid;
        undef $ChildPid;
    }

    unlink $PidFile if -f $PidFile;
}

sub cleanup () {
    for my $hdl (@CleanupHandlers) {
        $hdl->();
    }
}

sub get_canon_version (@) {
    sprintf "%d.%03d%03d", $_[0], $_[1], $_[2];
}

sub get_nginx_version () {
    my $out = `$NginxBinary -V 2>&1`;
    if (!defined $out || $? != 0) {
        bail_out("cannot run nginx binary \"$NginxBinary\": "
                 . ($out // $!));
    }
    if ($out =~ m{nginx[^/]*/(\d+)\.(\d+)\.(\d+)}) {
        return get_canon_version($1, $2, $3);
    }
    bail_out("cannot parse \"$NginxBinary -V\" output: $out");
}

# ---- server root, user files, nginx.conf ----------------------------------

# As in the CPAN module: remove only what a block may create (conf/,
# html/, logs/, cache/, *_temp, *_cache), in case TEST_NGINX_SERVROOT
# points somewhere it should not, then remove the root itself and bail
# out if anything else is left in it.  A suite that keeps files at the
# top of the server root (a runtime or trajectory dir, say) must name
# them *_temp or put them under logs/, or it stops the CPAN runner at
# its second block; failing here the same way keeps that from
# regressing unseen.
sub setup_server_root () {
    if (-d $ServRoot) {
        remove_tree($ConfDir, $HtmlDir, $LogDir, $CacheDir,
                    glob("$ServRoot/*_temp"), glob("$ServRoot/*_cache"));
        if (!rmdir $ServRoot) {
            my $err = "$!";
            my @left = map { s{.*/}{}r } glob("$ServRoot/* $ServRoot/.*");
            @left = grep { $_ ne '.' && $_ ne '..' } @left;
            bail_out("Can't remove $ServRoot (not empty?): $err"
                     . (@left ? " (left: @left)" : ''));
        }
    }

    for my $dir ($ServRoot, $LogDir, $HtmlDir, $ConfDir) {
        next if -d $dir;
        make_path($dir) or bail_out("cannot create $dir: $!");
    }

    open my $out, '>', "$HtmlDir/index.html"
        or bail_out("cannot write $HtmlDir/index.html: $!");
    print $out '<html><head><title>It works!</title></head>'
               . '<body>It works!</body></html>';
    close $out;
}

# --- user_files: ">>> name [touch-date]" lines followed by the content
sub write_user_files ($$) {
    my ($block, $rand_ports) = @_;
    my $name = $block->name;
    my $files = $block->user_files;

    return unless $files;

    if (!ref $files) {
        my @list;
        for my $line (split /^/m, $files) {
            if ($line =~ /^>>> (\S+)(?:\s+(.+))?/) {
                push @list, [$1, undef, $2];
                next;
            }
            if (!@list) {
                bail_out("$name - user_files must start with a "
                         . "\">>> name\" line");
            }
            $list[-1][1] .= $line;
        }
        $files = \@list;

    } elsif (ref $files ne 'ARRAY') {
        bail_out("$name - user_files must be a string or an ARRAY");
    }

    for my $file (@$files) {
        my ($fname, $body, $date) = @$file;
        my $path = $fname =~ m{^/} ? $fname : "$HtmlDir/$fname";

        if ($path =~ m{(.*)/} && !-d $1) {
            make_path($1) or bail_out("$name - cannot create $1: $!");
        }

        $body = expand_env_in_text($body // '', $name, $rand_ports);

        open my $out, '>', $path
            or bail_out("$name - cannot write $path: $!");
        binmode $out;
        print $out $body;
        close $out;

        if ($date) {
            system("TZ=GMT touch -t '$date' '$path'") == 0
                or bail_out("$name - cannot set date of $path");
        }
    }
}

sub write_config_file ($$$) {
    my ($block, $config, $rand_ports) = @_;
    my $name = $block->name;

    my $http_config = expand_env_in_text($block->http_config, $name,
                                         $rand_ports) // '';
    if ($FilterHttpConfig) {
        $http_config = $FilterHttpConfig->($http_config);
    }

    my $main_config = $block->main_config // '';
    if ($LoadModules) {
        # appended after the block's main_config, like the CPAN module
        my @lines = map { "load_module $_;" } grep { length }
                    split /\s+/, $LoadModules;
        $main_config .= "\n" . join("\n", @lines) . "\n" if @lines;
    }
    $main_config = expand_env_in_text($main_config, $name, $rand_ports);

    my $post_main_config = expand_env_in_text($block->post_main_config,
                                              $name, $rand_ports) // '';
    my $err_log_file = $block->error_log_file || $ErrLogFile;
    my $server_name = $block->server_name // $ServerName;
    $server_name =~ s/\\/\\\\/g;
    $server_name =~ s/'/\\'/g;

    my $env_lines = '';
    for my $v (@EnvToNginx) {
        $env_lines .= $v =~ /\s/ ? "env '$v';\n" : "env $v;\n";
    }

    my $root_location = $NoRootLocation ? '' : <<_EOC_;
        location / {
            root $HtmlDir;
            index index.html index.htm;
        }
_EOC_

    my $user = $> == 0 ? "user root;\n" : '';

    open my $out, '>', $ConfFile or bail_out("cannot write $ConfFile: $!");
    print $out <<_EOC_;
worker_processes  $Workers;
daemon $DaemonEnabled;
master_process $MasterProcessEnabled;
error_log $err_log_file $LogLevel;
pid       $PidFile;
$env_lines
$main_config

http {
    access_log $AccLogFile;

    default_type text/plain;
    keepalive_timeout  68;

$http_config

    server {
        listen          $ServerPort;
        server_name     '$server_name';

        client_max_body_size 30M;

        # Begin preamble config...
$ConfigPreamble
        # End preamble config...

        # Begin test case config...
$config
        # End test case config.

$root_location    }
}

$post_main_config

events {
    accept_mutex off;
    worker_connections  $WorkerConnections;
}
$user
_EOC_
    close $out;
}

sub valgrind_command () {
    my @cmd = ('valgrind', '-q', '--num-callers=100',
               "--log-file=$ValgrindLog");

    if ($UseValgrind =~ /^\d+$/) {
        push @cmd, '--tool=memcheck', '--leak-check=full',
                   '--show-possibly-lost=no', '--gen-suppressions=all';
    } else {
        push @cmd, split /\s+/, $UseValgrind;
    }

    for my $supp ('t/valgrind.suppress', 'valgrind.suppress') {
        push @cmd, '--suppressions=' . File::Spec->rel2abs($supp)
            if -f $supp;
    }

    return @cmd;
}

# Start nginx for a block.  Returns (ok, message).  With $must_die the
# caller wants nginx to fail, so only the exit status is reported.
sub start_nginx ($$) {
    my ($name, $must_die) = @_;
    my @cmd = ($NginxBinary, '-p', "$ServRoot/", '-c', $ConfFile);
    my $errfile = "$LogDir/nginx-startup.err";

    $ErrLogFilePos = 0;

    if ($UseValgrind && !defined $must_die) {
        my @vcmd = (valgrind_command(), @cmd);
        warn "$name\n";
        my $pid = fork();
        bail_out("$name - fork failed: $!") unless defined $pid;
        if ($pid == 0) {
            $InSubprocess = 1;
            setpgrp(0, 0);
            open STDOUT, '>', '/dev/null';
            open STDERR, '>', $errfile;
            { no warnings 'exec'; exec { $vcmd[0] } @vcmd; }
            POSIX::_exit(127);
        }
        $ChildPid = $pid;
        sleep $TestNginxSleep;
        return (1, '');
    }

    my $tries = 0;
    while (1) {
        my $status = system_quiet(\@cmd, $errfile);
        if (defined $must_die) {
            return ($status, slurp($errfile));
        }
        return (1, '') if $status == 0;

        my $err = slurp($errfile);
        # a port still held by a previous run: retry for a while
        if ($err =~ /Address already in use/ && ++$tries < 30) {
            sleep 0.1 * $tries > 1 ? 1 : 0.1 * $tries;
            next;
        }
        return (0, "cannot start nginx (\"@cmd\", status $status): $err");
    }
}

sub system_quiet ($$) {
    my ($cmd, $errfile) = @_;
    my $pid = fork();
    bail_out("fork failed: $!") unless defined $pid;
    if ($pid == 0) {
        $InSubprocess = 1;
        open STDOUT, '>', '/dev/null';
        open STDERR, '>', $errfile;
        { no warnings 'exec'; exec { $cmd->[0] } @$cmd; }
        POSIX::_exit(127);
    }
    waitpid($pid, 0);
    return $?;
}

sub slurp ($) {
    my $file = shift;
    open my $in, '<', $file or return '';
    my $data = do { local $/; <$in> };
    close $in;
    return $data // '';
}

# Lines appended to error.log since the previous call for this block.
sub error_log_data () {
    # give the log phase (after the connection is closed) time to write
    sleep $TestNginxSleep * 3;

    open my $in, '<', $ErrLogFile or return [];
    if (!$CheckAccumErrLog && $ErrLogFilePos > 0) {
        seek $in, $ErrLogFilePos, 0;
    }
    my @lines = <$in>;
    if (!$CheckAccumErrLog) {
        $ErrLogFilePos = tell $in;
    }
    close $in;
    return \@lines;
}

sub access_log_data () {
    sleep $TestNginxSleep * 3;
    open my $in, '<', $AccLogFile or return [];
    my @lines = <$in>;
    close $in;
    return \@lines;
}

# ---- the block loop -------------------------------------------------------

sub run_tests () {
    $NginxVersion = get_nginx_version();

    $ENV{TEST_NGINX_SERVER_PORT} //= $ServerPort;
    $ENV{TEST_NGINX_PORT} //= $ServerPort;

    my @blocks = Test::Base::blocks();
    @blocks = shuffle @blocks unless $NoShuffle;

    for my $block (@blocks) {
        for my $hdl (@BlockPreprocessors) {
            $hdl->($block);
        }

        $block->set_value('name', $0 . ' ' . $block->name);
        Test::Nginx::Socket::run_test($block);
        $PrevBlock = $block;
    }

    cleanup();
}

sub check_prev_block_valgrind_log () {
    check_prev_block_sanitizer_log();
    return unless $UseValgrind && defined $PrevBlock;
    Test::Nginx::Socket::check_valgrind_log($PrevBlock);
}

# make asan-test (RLM_SANITIZED): a sanitizer report that reached the
# error log (UBSan writes to stderr, which is the error log of nginx and
# of the rlm-sandboxd it supervises) fails the last block that ran on
# that nginx; reports written to files are checked after the whole run.
sub check_prev_block_sanitizer_log () {
    return unless $ENV{RLM_SANITIZED} && defined $PrevBlock;
    open my $in, '<', $ErrLogFile or return;
    my @hits = grep { /runtime error:|ERROR: (?:Address|Leak)Sanitizer/
                      || /SUMMARY: \w+Sanitizer/ } <$in>;
    close $in;
    return unless @hits;
    Test::More::fail($PrevBlock->name . ' - sanitizer report in error.log');
    Test::More::diag(@hits > 20 ? @hits[0 .. 19] : @hits);
}

sub check_prev_block_shutdown_error_log () {
    my $block = $PrevBlock;
    return unless defined $block;
    if (defined $block->shutdown_error_log
        || defined $block->no_shutdown_error_log)
    {
        $CheckShutdownErrorLog->($block, $ENV{TEST_NGINX_NO_CLEAN});
    }
}

END {
    return if $InSubprocess;

    cleanup();

    if ($UseValgrind || !$ENV{TEST_NGINX_NO_CLEAN}) {
        local $?;
        stop_nginx('END');
        check_prev_block_shutdown_error_log();
        check_prev_block_valgrind_log();
    }

    # a random port means a throw-away server root
    if ($Randomize && !$ENV{TEST_NGINX_SERVROOT}
        && $ServRoot =~ m{/t/servroot_\d+$})
    {
        remove_tree($ServRoot);
    }
}

1;
