#!/bin/sh
# After a sanitizer run (make asan-test): the reports the processes wrote
# under DIR (ASAN_OPTIONS/UBSAN_OPTIONS log_path).  Prints each and exits
# 1 if there is any, so that a report fails the run even when no test
# noticed the process that wrote it.
#
#     t/sanitizer-reports.sh DIR

dir=${1:?usage: $0 DIR}

if [ ! -d "$dir" ]; then
    echo "ngx_rlm: no sanitizer report directory $dir" >&2
    exit 1
fi

n=0
for f in "$dir"/*; do
    [ -f "$f" ] || continue
    n=$((n + 1))
    echo "== sanitizer report $f:" >&2
    head -n 80 "$f" >&2
done

if [ "$n" -gt 0 ]; then
    echo "ngx_rlm: FAIL: $n sanitizer report(s) in $dir" >&2
    exit 1
fi

echo "ngx_rlm: no sanitizer report in $dir"
