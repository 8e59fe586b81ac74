# Runs the C unit tests of the response and SSE parsers (t/unit/parse_test.c,
# built with ASan and UBSan by t/unit/unit.mk) and checks their TAP output.

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(dirname);
use Test::More;

my $top = abs_path(dirname(__FILE__) . '/..');
my $build = $ENV{RLM_BUILD} ? "$ENV{RLM_BUILD}/unit" : "$top/build/unit";

my $out = `make -s -C '$top' -f t/unit/unit.mk unit UNIT_BUILD='$build' 2>&1`;
is($?, 0, 'parse_test builds without warnings') or diag($out);

my @lines = `'$build/parse_test' 2>&1`;
my $status = $?;

my ($plan, $seen) = (undef, 0);

for my $line (@lines) {
    chomp $line;

    if ($line =~ /^(not )?ok (\d+) - (.*)$/) {
        $seen++;
        ok(!$1, "parse_test: $3");
        is($2, $seen, "parse_test numbers its tests in order") if $2 != $seen;

    } elsif ($line =~ /^1\.\.(\d+)$/) {
        $plan = $1;

    } elsif ($line =~ /^#/) {
        diag($line);

    } elsif ($line =~ /\S/) {
        # sanitizer reports and anything else unexpected
        fail("parse_test printed no stray output");
        diag($line);
    }
}

is($status, 0, 'parse_test exits with 0 (no failure, no sanitizer report)');
ok(defined $plan && $plan == $seen && $seen >= 40,
   "parse_test ran its whole plan ($seen tests)");

done_testing();
