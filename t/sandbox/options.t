# Manager options: socket owner and mode, extra preloaded modules, default
# limits, refusing bad option values, and the clean environment.

use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use SandboxUtil;
use Test::More;

require_root();

# --socket-owner: every socket belongs to that user, mode 0660
my $m = start_manager('--pool', '1', '--socket-owner', '65534:65534');
my @st = stat($m->{control});
is($st[4], 65534, 'control socket owned by the socket owner uid');
is($st[5], 65534, 'and gid');
is($st[2] & 07777, 0660, 'control socket mode 0660');
my $a = control($m, { op => 'acquire', session => 'own' });
@st = stat($a->{path});
is($st[4], 65534, 'sandbox socket owned by the socket owner');
is($st[2] & 07777, 0660, 'sandbox socket mode 0660');

# the manager runs with an empty environment, so do the sandboxes
$ENV{RLM_TEST_SECRET} = 'sk-should-not-leak';
# (sanitizer settings of an ASan build are the one exception)
my $env = join ' ', grep { !/^(?:ASAN|UBSAN|LSAN)_OPTIONS=/ }
    split /\0/, SandboxUtil::slurp("/proc/$m->{pid}/environ");
is($env, '', 'manager environment is empty (re-exec scrubbed it)');
my $ch = connect_sock($a->{path});
my $r = request($ch, { op => 'exec', code => "import os\nprint(sorted(k "
    . "for k in os.environ if not k.endswith('SAN_OPTIONS')))" });
is($r->{stdout}, "[]\n", 'sandbox environment is empty');
close $ch;
stop_manager($m);

# a manager started with a secret in its environment does not keep it
$m = start_manager('--pool', '0');
$env = SandboxUtil::slurp("/proc/$m->{pid}/environ");
unlike($env, qr/sk-should-not-leak/, 'secret from the parent not kept');
stop_manager($m);
delete $ENV{RLM_TEST_SECRET};

# --allow-module preloads more modules in the zygote
my $res = ctl_run("import sys\nprint('xml.dom.minidom' in sys.modules, "
                  . "'sqlite3' in sys.modules)\n",
                  '--daemon-arg', '--allow-module',
                  '--daemon-arg', 'xml.dom.minidom');
is($res->[0]{stdout}, "True False\n", 'allowed module preloaded, others not');

# a module that does not exist stops the start with a clear error
my ($out, $rc) = SandboxUtil::run_cmd([$CTL, 'run', '--daemon-arg',
    '--allow-module', '--daemon-arg', 'no_such_module_xyz'], "x = 1\n");
isnt($rc, 0, 'unknown --allow-module: the manager does not start');

# default limits come from the options and show in acquire
$m = start_manager('--pool', '0', '--wall-ms', '1234', '--memory-mb', '200',
                   '--output-bytes', '10');
$a = control($m, { op => 'acquire', session => 'defaults' });
is($a->{limits}{wall_ms}, 1234, 'default wall_ms from --wall-ms');
is($a->{limits}{memory_mb}, 200, 'default memory_mb from --memory-mb');
$ch = connect_sock($a->{path});
$r = request($ch, { op => 'exec', code => "print('0123456789abc')" });
is($r->{status}, 'output_truncated', 'default output cap applies');
is($r->{stdout}, '0123456789', 'cut at --output-bytes');
$r = request($ch, { op => 'exec', code => "import time\ntime.sleep(5)" });
is($r->{status}, 'timeout', 'default wall limit applies');
ok($r->{duration_ms} < 4000, 'after about --wall-ms');
close $ch;
stop_manager($m);

# bad option values are refused
for my $bad (['--pool', 'x'], ['--pool', '5', '--max-sandboxes', '2'],
             ['--socket-owner', 'nobody'], ['--bogus']) {
    my (undef, $rc) = SandboxUtil::run_cmd(
        [$SANDBOXD, '--runtime-dir', '/tmp/rlm-bad-opts', @$bad], '');
    isnt($rc, 0, 'refused: ' . join(' ', @$bad));
}
rmdir '/tmp/rlm-bad-opts/s';
unlink '/tmp/rlm-bad-opts/manager.lock';
rmdir '/tmp/rlm-bad-opts';

done_testing();
