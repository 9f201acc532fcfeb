#!/usr/bin/env bash
# A malformed or unreadable trace makes `kvidx-bench w2` exit 2 (not crash)
# with a message naming the file and the offending line.
# usage: w2_malformed_test.sh BENCH DATA_DIR
set -uo pipefail
bench=$1 data=$2
fail=0
expect() {   # trace, text the error must contain
  err=$("$bench" w2 --runs=1 --trace "$1" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" -ne 2 ] || ! grep -qF -- "$2" <<<"$err"; then
    echo "FAIL: $1: exit $rc, stderr: $err (wanted exit 2 and '$2')" >&2
    fail=1
  fi
}
expect "$data/w2_truncated_line.jsonl" "w2_truncated_line.jsonl:2: not valid JSON"
expect "$data/w2_negative_id.jsonl" "w2_negative_id.jsonl:3: \"hash_ids\" holds -2"
expect "$data/w2_no_hash_ids.jsonl" "w2_no_hash_ids.jsonl:1: no \"hash_ids\" field"
expect "$data/w2_not_object.jsonl" "w2_not_object.jsonl:1: not a JSON object"
expect "$data/does_not_exist.jsonl" "cannot open trace"
# 100,000 nested arrays inside hash_ids: reporting them must not recurse.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '{"hash_ids": %s%s}\n' "$(printf '[%.0s' {1..100000})" "$(printf ']%.0s' {1..100000})" >"$tmp/deep.jsonl"
expect "$tmp/deep.jsonl" "deep.jsonl:1: \"hash_ids\" holds a JSON array"
exit $fail
