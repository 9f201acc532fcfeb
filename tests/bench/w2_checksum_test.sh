#!/usr/bin/env bash
# Correctness of `kvidx-bench w2` (never its speed): the run must succeed and
# print EXPECTED as the checksum of kvidx, of the naive baseline, and as the
# bare agreed line workload.md specifies.
# usage: w2_checksum_test.sh BENCH EXPECTED [w2 flags...]
set -euo pipefail
bench=$1 expected=$2
shift 2
out=$("$bench" w2 --runs=1 "$@")
echo "$out"
for line in "w2 impl=kvidx checksum $expected" "w2 impl=naive checksum $expected" "$expected"; do
  if ! grep -qxF -- "$line" <<<"$out"; then
    echo "FAIL: missing line: $line" >&2
    exit 1
  fi
done
