#!/bin/sh
# Benchmarks of rlm-sandboxd with baselines in the same run.
#
#   bench/sandbox_bench.sh [--iterations N] [--live N] [--context-mb N]
#
# Builds the sandbox tools into build/ if needed, runs
# build/bin/rlm-sandbox-bench as root and prints a Markdown table (paste it
# into docs/benchmarks.md with the command line and the date).

set -e

top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$top/build}

if [ "$(id -u)" != 0 ]; then
    echo "sandbox_bench: run as root (sandboxes use namespaces/cgroups)" >&2
    exit 1
fi

make -s -C "$top/sandbox" BUILD="$build" >/dev/null

echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $(uname -r), $(nproc) cores"
echo "# $build/bin/rlm-sandbox-bench --sandboxd $build/bin/rlm-sandboxd $*"

exec "$build/bin/rlm-sandbox-bench" --sandboxd "$build/bin/rlm-sandboxd" \
    "$@" 2>/dev/null
