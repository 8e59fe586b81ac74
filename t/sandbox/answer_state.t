# The final answer (answer dict, FINAL, FINAL_VAR) and the shared state
# dict with deltas in both directions.

use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use SandboxUtil;
use Test::More;

require_root();

my $r = ctl_run(cells(
    "print(answer)",
    "answer['content'] = 'draft'",
    "answer['ready'] = True\nanswer['content'] = 'changed later'",
    "x = 1",
));
is($r->[0]{stdout}, "{'content': '', 'ready': False}\n",
   'answer starts empty and not ready');
is($r->[1]{answer}, undef, 'content alone is not an answer');
is_deeply($r->[2]{answer}, { content => 'draft', ready => JSON::PP::true },
          'captured when ready is set, with the content at that moment');
is($r->[3]{answer}, undef, 'reported once, in the cell that set it');

# rebinding the name to a new dict is detected
$r = ctl_run(cells("answer = {'content': 'rebound', 'ready': True}",
                   "print(type(answer).__name__, answer['content'])"));
is($r->[0]{answer}{content}, 'rebound', 'rebinding answer is captured');
is($r->[1]{stdout}, "_Answer rebound\n",
   'the tracked answer object is restored with the new content');

# answer.update() bypasses __setitem__: caught at the end of the cell
$r = ctl_run("answer.update(content='via update', ready=True)\n");
is($r->[0]{answer}{content}, 'via update', 'update() with ready captured');

# FINAL and FINAL_VAR
$r = ctl_run(cells("FINAL(6 * 7)", "FINAL('text')"));
is($r->[0]{answer}{content}, '42', 'FINAL(x) gives str(x)');
is($r->[1]{answer}{content}, 'text', 'FINAL(str)');

$r = ctl_run(cells("FINAL_VAR('result')",
                   "result = {'k': [1, 2]}\nFINAL_VAR('result')",
                   "FINAL_VAR(['direct'])"));
is($r->[0]{answer}, undef, 'FINAL_VAR of a missing variable is no answer');
like($r->[0]{stdout}, qr/Error: variable 'result' not found/,
     'and says so');
is($r->[0]{status}, 'ok', 'without failing the cell');
is($r->[1]{answer}{content}, "{'k': [1, 2]}", 'FINAL_VAR(name) answers');
is($r->[2]{answer}{content}, "['direct']", 'FINAL_VAR(value) answers');

# state: deltas out of the sandbox
$r = ctl_run(cells(
    "state['a'] = 1\nstate['b'] = [1]",
    "state['b'].append(2)",
    "del state['a']",
    "x = 1",
    "state['obj'] = object()",
));
is_deeply($r->[0]{state_delta}, { a => 1, b => [1] }, 'added keys');
is_deeply($r->[1]{state_delta}, { b => [1, 2] },
          'in-place change of a value detected');
is_deeply($r->[2]{state_delta}, { __deleted__ => ['a'] }, 'deleted keys');
is_deeply($r->[3]{state_delta}, {}, 'no change, empty delta');
like($r->[4]{state_delta}{obj}, qr/^<object object at/,
     'non-JSON values sent as their repr');

# state: host updates into the sandbox, not echoed back as deltas
$r = ctl_run(cells("print(sorted(state.items()))", "state['mine'] = 2"),
             '--state', '{"from_host": 7, "other": "x"}');
is($r->[0]{status}, 'ok', 'state_update answered ok');
is($r->[1]{stdout}, "[('from_host', 7), ('other', 'x')]\n",
   'host update visible to the next cell');
is_deeply($r->[1]{state_delta}, {}, 'host update not echoed as a delta');
is_deeply($r->[2]{state_delta}, { mine => 2 }, 'only the cell\'s change');

# rebinding state keeps one shared object
$r = ctl_run(cells("state = {'r': 1}", "print(state)"));
is_deeply($r->[0]{state_delta}, { r => 1 }, 'rebinding state is a delta');
is($r->[1]{stdout}, "{'r': 1}\n", 'and the content is kept');

done_testing();
