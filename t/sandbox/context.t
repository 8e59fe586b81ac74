# Context loading: 100 MB text and JSON blobs become `context` (or a named
# variable) without multiplying memory.

use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use SandboxUtil;
use File::Temp qw( tempfile );
use Test::More;

require_root();

my $limits = '{"memory_mb":2048}';
my $MB = 1024 * 1024;

# 100 MB of 7-bit text
my ($tfh, $text) = tempfile('ctx-XXXXXX', TMPDIR => 1, UNLINK => 1);
my $line = ('0123456789' x 10) . "\n";          # 101 bytes
my $n = int(100 * $MB / length $line) + 1;
print {$tfh} $line x $n;
close $tfh;
my $size = -s $text;
ok($size >= 100 * $MB, "text context is $size bytes");

my $r = ctl_run(cells(
    "import resource\nprint(len(context), context[:10], context.count('\\n'))",
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)",
), '--context', $text, '--limits', $limits);
is($r->[0]{status}, 'ok', 'load_context ok');
is($r->[0]{kind}, 'str', 'text becomes a str');
is($r->[0]{bytes}, $size, 'all bytes counted');
is($r->[0]{name}, 'context', 'named context');
is($r->[1]{stdout}, "$size 0123456789 $n\n", 'the whole text arrived');
my ($peak) = $r->[2]{stdout} =~ /(\d+)/;
ok($peak < 100 + 160, "peak RSS ${peak} MiB: the text is held once, "
   . 'not copied through bytes + str');

# non-ASCII text is decoded as UTF-8
my ($ufh, $utext) = tempfile('ctxu-XXXXXX', TMPDIR => 1, UNLINK => 1);
binmode $ufh;
print {$ufh} "caf\xc3\xa9 \xe2\x82\xac\n" x 100000;
close $ufh;
$r = ctl_run("print(len(context_1), context_1[:6])\n", '--context', $utext,
             '--context-name', 'context_1');
is($r->[0]{name}, 'context_1', 'context_N names');
is($r->[1]{stdout}, "700000 caf\x{e9} \x{20ac}\n", 'UTF-8 decoded');

# 100 MB of JSON: a list of 1M records
my ($jfh, $jpath) = tempfile('ctxj-XXXXXX', TMPDIR => 1, UNLINK => 1);
my $rec = '"' . ('x' x 92) . '"';
my $count = int(100 * $MB / (length($rec) + 1)) + 1;
print {$jfh} '[' . join(',', ($rec) x $count) . ']';
close $jfh;
my $jsize = -s $jpath;
$r = ctl_run("print(type(context).__name__, len(context), len(context[-1]))\n",
             '--context-json', $jpath, '--limits', $limits);
is($r->[0]{status}, 'ok', "JSON context of $jsize bytes loaded");
is($r->[0]{kind}, 'list', 'JSON array becomes a list');
is($r->[1]{stdout}, "list $count 92\n", 'every record arrived');

# a JSON object becomes a dict; bad JSON is an error, not a crash
my ($ofh, $opath) = tempfile('ctxo-XXXXXX', TMPDIR => 1, UNLINK => 1);
print {$ofh} '{"a": [1, 2], "b": {"c": "d"}}';
close $ofh;
$r = ctl_run("print(context['b']['c'])\n", '--context-json', $opath);
is($r->[0]{kind}, 'dict', 'JSON object becomes a dict');
is($r->[1]{stdout}, "d\n", 'dict content');

open($ofh, '>', $opath);
print {$ofh} '{"a": ';
close $ofh;
$r = ctl_run("print('after')\n", '--context-json', $opath);
is($r->[0]{status}, 'error', 'truncated JSON is an error');
is($r->[1]{stdout}, "after\n", 'the sandbox keeps serving');

# a blob bigger than the manager's --max-blob-mb is refused at the frame
my ($bfh, $bpath) = tempfile('ctxb-XXXXXX', TMPDIR => 1, UNLINK => 1);
print {$bfh} 'y' x (2 * $MB);
close $bfh;
$r = ctl_run("print('x')\n", '--context', $bpath, '--daemon-arg',
             '--max-blob-mb', '--daemon-arg', '1');
is($r->[0]{status}, 'error', 'oversized blob refused');
is($r->[0]{error}{ename}, 'ProtocolError', 'as a protocol error');

done_testing();
