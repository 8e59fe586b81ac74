# REPL semantics of a sandbox: persistence, captured output, exceptions,
# echo, reserved names, SHOW_VARS, vars/get_var, host tools.

use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use SandboxUtil;
use Test::More;

require_root();

my $r = ctl_run(cells(
    "x = 41\ndef inc(v):\n    return v + 1",
    "print(inc(x))",
    "import sys\nprint('to out')\nprint('to err', file=sys.stderr)",
    "1/0",
    "print(x)",
));
is(scalar @$r, 5, 'five cells, five results');
is($r->[0]{status}, 'ok', 'definition cell ok');
is($r->[1]{stdout}, "42\n", 'variables and functions persist across cells');
is($r->[2]{stdout}, "to out\n", 'stdout captured');
is($r->[2]{stderr}, "to err\n", 'stderr captured separately');
is($r->[3]{status}, 'error', 'exception gives status error');
is($r->[3]{error}{ename}, 'ZeroDivisionError', 'ename');
is($r->[3]{error}{evalue}, 'division by zero', 'evalue');
like($r->[3]{error}{traceback}, qr/<cell-4>.*line 1.*1\/0/s,
     'traceback names the cell and shows its source line');
unlike($r->[3]{error}{traceback}, qr/rlm_repl/,
       'traceback hides the runtime frames');
is($r->[4]{stdout}, "41\n", 'an error does not lose the namespace');

# syntax errors and exceptions raised by user-defined functions
$r = ctl_run(cells("def f(:\n  pass", "def g():\n    raise KeyError('k')",
                   "g()"));
is($r->[0]{error}{ename}, 'SyntaxError', 'syntax error reported');
is($r->[2]{error}{ename}, 'KeyError', 'exception from an earlier cell def');
like($r->[2]{error}{traceback}, qr/in g\n.*raise KeyError/s,
     'traceback shows the function defined in an earlier cell');

# echo of a bare last-line expression only when asked
$r = ctl_run(cells("y = 6\ny * 7", "None", "print('p')"));
is($r->[0]{stdout}, '', 'no echo by default');
$r = ctl_run(cells("y = 6\ny * 7", "None", "'s'"), '--echo');
is($r->[0]{stdout}, "42\n", 'echo prints the repr of the last expression');
is($r->[1]{stdout}, '', 'echo of None prints nothing');
is($r->[2]{stdout}, "'s'\n", 'echo uses repr');

# reserved names are restored after each cell
$r = ctl_run(cells("llm_query = 5\nFINAL = None\nprint(llm_query)",
                   "print(callable(llm_query), callable(FINAL))"));
is($r->[0]{stdout}, "5\n", 'a cell may shadow a reserved name');
is($r->[1]{stdout}, "True True\n", 'reserved names restored afterwards');

# SHOW_VARS, vars and get_var
$r = ctl_run(cells("import json\nalpha = [1, 2, 3]\nbeta = 'b' * 500\n"
                   . "_hidden = 1", "SHOW_VARS()"),
             '--vars', '--get-var', 'alpha');
like($r->[1]{stdout}, qr/alpha: list/, 'SHOW_VARS lists variables');
like($r->[1]{stdout}, qr/beta: str/, 'SHOW_VARS lists types');
unlike($r->[1]{stdout}, qr/json|_hidden|llm_query/,
       'SHOW_VARS hides modules, private and reserved names');
my %vars = map { $_->{name} => $_ } @{ $r->[2]{vars} };
is_deeply([sort keys %vars], ['alpha', 'beta'], 'vars lists user names');
is($vars{alpha}{type}, 'list', 'vars gives the type');
is($vars{alpha}{preview}, '[1, 2, 3]', 'vars gives a preview');
ok(length($vars{beta}{preview}) < 130, 'previews are short');
is($vars{beta}{len}, 500, 'vars gives the length');
is($r->[3]{status}, 'ok', 'get_var ok');
is($r->[3]{value}, '[1, 2, 3]', 'get_var returns str(value)');

$r = ctl_run("a = 1\n", '--get-var', 'missing');
is($r->[1]{status}, 'error', 'get_var of a missing name is an error');
is($r->[1]{error}{ename}, 'NameError', 'get_var error is NameError');

# get_var of a big value is cut at max_bytes (default 8 MiB)
{
    my $m = start_manager('--pool', '0');
    my $a = control($m, { op => 'acquire', session => 'gv' });
    my $ch = connect_sock($a->{path});
    request($ch, { op => 'exec', code => "big = 'q' * (10 * 1024 * 1024)" });
    my $g = request($ch, { op => 'get_var', name => 'big', max_bytes => 100 });
    is(length $g->{value}, 100, 'get_var max_bytes cuts the value');
    ok($g->{truncated}, 'and says so');
    $g = request($ch, { op => 'get_var', name => 'big' });
    is(length $g->{value}, 8 * 1024 * 1024, 'default cut at 8 MiB');
    $g = request($ch, { op => 'get_var', name => 'x_missing' });
    is($g->{status}, 'error', 'still usable afterwards');
    close $ch;
    stop_manager($m);
}

# host tools defined by name call back with fn "tool"
$r = ctl_run("print(search('cats', limit=3))\n", '--tools', '["search"]',
             '--reply', 'tool says {prompt}', '--show-calls');
is($r->[0]{status}, 'ok', 'define_tools ok');
is($r->[1]{fn}, 'tool', 'tool call frame');
is($r->[1]{args}{name}, 'search', 'tool name sent');
is_deeply($r->[1]{args}{args}, ['cats'], 'positional args sent');
is_deeply($r->[1]{args}{kwargs}, {limit => 3}, 'keyword args sent');
is($r->[2]{stdout}, "tool says search\n", 'tool result returned');

# the namespace is per sandbox: a new session starts empty
$r = ctl_run("print('x' in globals())\n");
is($r->[0]{stdout}, "False\n", 'a fresh session does not see old names');

# random streams differ between sandboxes forked from one zygote
my $m = start_manager('--pool', '2');
my @rnd;
for (1 .. 3) {
    my $x = ctl_run("import random\nprint(random.getrandbits(64))\n",
                    '--manager', $m->{control});
    push @rnd, $x->[0]{stdout};
}
stop_manager($m);
isnt($rnd[0], $rnd[1], 'random reseeded per sandbox (1 vs 2)');
isnt($rnd[1], $rnd[2], 'random reseeded per sandbox (2 vs 3)');

done_testing();
