#!/bin/sh
# Builds the libFuzzer targets and runs each for a bounded time.
#
#   t/fuzz/run.sh [seconds per target, default 60]
#
# Needs clang with libFuzzer (Debian: apt-get install clang).  Corpora are
# kept in build/fuzz/corpus-* between runs; crashes land in build/fuzz/.

set -e

cd "$(dirname "$0")/../.."

SECONDS_PER_TARGET=${1:-60}

make -s -f t/unit/unit.mk fuzz

for target in parse sse jsonstr proto; do
    corpus=build/fuzz/corpus-$target
    mkdir -p "$corpus"
    cp t/fuzz/seeds/$target/* "$corpus"/ 2>/dev/null || true

    echo "fuzz_$target: ${SECONDS_PER_TARGET}s"
    build/fuzz/fuzz_$target -max_total_time="$SECONDS_PER_TARGET" \
        -max_len=4096 -print_final_stats=1 \
        -artifact_prefix=build/fuzz/crash-$target- "$corpus" 2>&1 \
        | grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb)|ERROR|Done"
done
