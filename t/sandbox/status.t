# Every typed status of a cell: ok, error, timeout (wall and CPU, state
# kept), output_truncated, oom (MemoryError and cgroup OOM kill), crashed,
# and the hard limits that end a sandbox.

use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use SandboxUtil;
use Test::More;

require_root();

my $r = ctl_run(cells(
    "keep = 'kept'\nimport time",
    "time.sleep(30)",
    "print(keep)",
), '--timeout-ms', '700');

is($r->[0]{status}, 'ok', 'ok status');
is($r->[1]{status}, 'timeout', 'sleeping past the wall limit: timeout');
is($r->[1]{error}{ename}, 'TimeoutError', 'raised as TimeoutError');
like($r->[1]{error}{evalue}, qr/wall/, 'the wall timer fired');
ok($r->[1]{duration_ms} < 20000, 'the cell was cut short');
is($r->[2]{stdout}, "kept\n", 'state survives a soft wall timeout');

$r = ctl_run(cells(
    "keep = 'kept'",
    "n = 0\nwhile True:\n    n += 1",
    "print(keep, n > 0)",
), '--timeout-ms', '20000', '--limits', '{"cpu_s":1}');
is($r->[1]{status}, 'timeout', 'CPU spin past cpu_s: timeout');
like($r->[1]{error}{evalue}, qr/CPU/, 'the CPU limit fired');
is($r->[2]{stdout}, "kept True\n", 'state survives a soft CPU timeout');

# a user TimeoutError is an ordinary error
$r = ctl_run("raise TimeoutError('mine')\n");
is($r->[0]{status}, 'error', 'a TimeoutError the code raises is an error');

# timeout caught by the code: the cell completes normally
$r = ctl_run(cells("import time\ntry:\n    time.sleep(5)\n"
                   . "except TimeoutError:\n    print('caught')"),
             '--timeout-ms', '300');
is($r->[0]{status}, 'ok', 'a caught soft timeout leaves status ok');
is($r->[0]{stdout}, "caught\n", 'the code saw the TimeoutError');

# code that swallows the timeout and keeps going is killed (hard limit)
$r = ctl_run(cells("import time\nwhile True:\n    try:\n"
                   . "        time.sleep(5)\n    except TimeoutError:\n"
                   . "        pass", "print('unreachable')"),
             '--timeout-ms', '300');
is(scalar @$r, 1, 'no cell runs after the hard wall kill');
is($r->[0]{status}, 'timeout', 'hard wall limit reported as timeout');
is($r->[0]{reason}, 'wall_limit', 'manager reason wall_limit');

# code that swallows the CPU timeout and keeps spinning is killed
$r = ctl_run(cells("while True:\n    try:\n        sum(range(10 ** 6))\n"
                   . "    except TimeoutError:\n        pass",
                   "print('unreachable')"),
             '--timeout-ms', '60000', '--limits', '{"cpu_s":1}');
is(scalar @$r, 1, 'no cell runs after the hard CPU kill');
is($r->[0]{status}, 'timeout', 'hard CPU limit reported as timeout');
is($r->[0]{reason}, 'cpu_limit', 'manager reason cpu_limit');

# output cap
$r = ctl_run(cells("print('a' * 5000)\nimport sys\n"
                   . "sys.stderr.write('b' * 5000)",
                   "print('small')",
                   "print('\\u00e9' * 3000)"),
             '--output-bytes', '1000');
is($r->[0]{status}, 'output_truncated', 'output beyond the cap');
ok($r->[0]{output_truncated}, 'output_truncated flag');
is(length($r->[0]{stdout}) + length($r->[0]{stderr}), 1000,
   'exactly the cap is kept');
is($r->[0]{stdout}, 'a' x 1000, 'the first bytes are kept');
is($r->[1]{status}, 'ok', 'the next cell is not truncated');
is($r->[2]{status}, 'output_truncated', 'multi-byte output truncated');
my $bytes = do { use bytes; length($r->[2]{stdout}) };
ok($bytes <= 1000 * 2, 'cap counted in bytes, cut on a character');
$r = ctl_run("print('x' * (2 * 1024 * 1024))\n");
is($r->[0]{status}, 'output_truncated', 'default cap is 1 MiB');
is(length($r->[0]{stdout}), 1024 * 1024, 'default cap keeps 1 MiB');

# a result too big for one frame is refused as such; the channel lives on
$r = ctl_run(cells("print('z' * (20 * 1024 * 1024))", "print('next')"),
             '--output-bytes', '30000000');
is($r->[0]{status}, 'error', 'a result over the 16 MiB frame limit');
is($r->[0]{error}{ename}, 'ResultTooLarge', 'is ResultTooLarge');
is($r->[1]{stdout}, "next\n", 'and the channel keeps working');

# MemoryError inside Python (RLIMIT_AS): status oom, sandbox lives on
$r = ctl_run(cells("big = 'x' * (8 * 1024 * 1024 * 1024)", "print('alive')"));
is($r->[0]{status}, 'oom', 'MemoryError gives status oom');
SKIP: {
    # an ASan build runs without RLIMIT_AS (its shadow needs terabytes of
    # address space): the allocation succeeds and the cgroup kills instead
    skip 'ASan build: no RLIMIT_AS, so no MemoryError', 2
        if `ldd $SANDBOXD 2>/dev/null` =~ /libasan/;
    is($r->[0]{error}{ename}, 'MemoryError', 'ename MemoryError');
    is($r->[1]{stdout}, "alive\n", 'the sandbox survives a MemoryError');
}

# the same on the heap, below RLIMIT_AS but over the soft limit
# (RLIMIT_DATA): MemoryError, the sandbox lives on
SKIP: {
    skip 'ASan build: no RLIMIT_DATA', 3
        if `ldd $SANDBOXD 2>/dev/null` =~ /libasan/;
    $r = ctl_run(cells("b = bytearray(400 * 1024 * 1024)",
                       "print('alive')"),
                 '--limits', '{"memory_mb":128}');
    is($r->[0]{status}, 'oom', 'over the soft limit: status oom');
    is($r->[0]{error}{ename}, 'MemoryError', 'a MemoryError');
    is($r->[1]{stdout}, "alive\n", 'the sandbox survives it');
}

# touching more memory than the cgroup allows where the soft limit does
# not count it (a shared mapping): OOM kill, seen via status
$r = ctl_run(cells("import mmap\nm = mmap.mmap(-1, 400 << 20)\n"
                   . "c = b'x' * (1 << 20)\n"
                   . "for i in range(0, 400 << 20, 1 << 20):\n"
                   . "    m[i:i + (1 << 20)] = c",
                   "print('unreachable')"),
             '--limits', '{"memory_mb":128}');
is(scalar @$r, 1, 'the OOM-killed sandbox runs nothing more');
is($r->[0]{status}, 'oom', 'cgroup OOM kill reported as oom');
is($r->[0]{reason}, 'oom', 'manager status reason oom');

# a crash (segfault in C) is reported with its signal
$r = ctl_run(cells("import ctypes\nctypes.string_at(0)",
                   "print('unreachable')"));
is(scalar @$r, 1, 'nothing runs after a crash');
is($r->[0]{status}, 'crashed', 'segfault reported as crashed');
ok($r->[0]{signal} > 0, 'with the signal that killed it');

# a sandbox that exits on its own mid-cell: the host calls it sandbox_lost
$r = ctl_run(cells("import os\nos._exit(0)", "print('unreachable')"));
is(scalar @$r, 1, 'nothing runs after the sandbox exited');
is($r->[0]{status}, 'sandbox_lost', 'channel closed without a result');
is($r->[0]{reason}, 'exited', 'manager reason exited');

# exit() in a cell is an error, not the end of the sandbox
$r = ctl_run(cells("import sys\nsys.exit(3)", "print('still')"));
is($r->[0]{status}, 'error', 'sys.exit is an error');
is($r->[0]{error}{ename}, 'SystemExit', 'ename SystemExit');
is($r->[1]{stdout}, "still\n", 'the sandbox keeps serving');

done_testing();
