#!/usr/bin/env bash
# End to end (issue #15 item 8): three kvidx-server processes on the same
# kvidx-sim fleet; A and C never restart, B is SIGKILLed and SIGTERMed in
# turn and started again on its data dir while traffic flows (periodic
# snapshots every second). At the end every source's GPU copies, blocks per
# tier and last seq must be equal on all three (exit 1 and the differences
# otherwise). The block-by-block comparison is tests/server/
# restart_parity_test.cc; this is the same check on real processes, signals
# and /metrics, as the drift was first seen.
#
#   BUILD_DIR=build bash tests/deploy/restart_parity_e2e.sh
#
# Needs $BUILD_DIR/bin/kvidx-server, kvidx-sim and curl. Loopback only,
# temp dirs, ~35 s (RESTARTS=4 restarts, 3 s apart).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
BIN=$BUILD_DIR/bin
RESTARTS=${RESTARTS:-4}
for b in kvidx-server kvidx-sim; do
  [ -x "$BIN/$b" ] || { echo "restart_parity_e2e: $BIN/$b missing (build it first)" >&2; exit 2; }
done

T=$(mktemp -d -t kvidx-parity-XXXXXX)
declare -A PID=()
cleanup() {
  for n in "${!PID[@]}"; do kill "${PID[$n]}" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$T"
}
trap cleanup EXIT

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
BASE=""
for _ in $(seq 1 50); do   # 40 free ports: the fleet's 20, then 6 for the servers
  b=$((21000 + (RANDOM % 200) * 40))
  busy=0
  for p in $(seq "$b" $((b + 39))); do if port_busy "$p"; then busy=1; break; fi; done
  if [ "$busy" = 0 ]; then BASE=$b; break; fi
done
[ -n "$BASE" ] || { echo "restart_parity_e2e: no free port range" >&2; exit 1; }
FLEET=(--replicas 2 --dp 2 --base-port "$BASE" --blocks-per-rank 256)
echo "token-$RANDOM$RANDOM" >"$T/token"

i=0
for n in A B C; do
  mkdir -p "$T/$n"
  {
    echo "grpc: {listen: \"127.0.0.1:$((BASE + 30 + 2 * i))\", admin_token_file: \"$T/token\"}"
    echo "metrics: {listen: \"127.0.0.1:$((BASE + 31 + 2 * i))\"}"
    echo "data_dir: \"$T/$n/data\""
    echo "snapshot: {interval_seconds: 1, sync: false}"
    echo "log: {level: warn}"
    "$BIN/kvidx-sim" "${FLEET[@]}" --print-config
  } >"$T/$n/kvidx.yaml"
  i=$((i + 1))
done
start() {
  "$BIN/kvidx-server" --config "$T/$1/kvidx.yaml" >>"$T/$1/server.log" 2>&1 &
  PID[$1]=$!
}
for n in A B C; do start "$n"; done
sleep 1

"$BIN/kvidx-sim" --server "127.0.0.1:$((BASE + 30))" --token-file "$T/token" "${FLEET[@]}" --routing random \
  --duration $((RESTARTS * 4 + 8)) --rate 400 --full-report 0.2 --samples 100 --quiet --json \
  >"$T/report.json" 2>"$T/sim.log" &
SIM=$!
for r in $(seq 1 "$RESTARTS"); do
  sleep 3
  if [ $((r % 2)) = 1 ]; then sig=KILL; else sig=TERM; fi
  kill -"$sig" "${PID[B]}"
  wait "${PID[B]}" 2>/dev/null || true
  sleep 1
  start B
done
rc=0
wait "$SIM" || rc=$?
[ "$rc" = 0 ] || { echo "restart_parity_e2e: kvidx-sim exit $rc"; tail -5 "$T/sim.log"; exit 1; }
sleep 1

state() {
  curl -fsS "127.0.0.1:$1/metrics" | grep -E '^kvidx_source_(gpu_copies|blocks|last_seq)\{' | sort
}
state $((BASE + 31)) >"$T/a.txt"
state $((BASE + 33)) >"$T/b.txt"
state $((BASE + 35)) >"$T/c.txt"
[ -s "$T/a.txt" ] || { echo "restart_parity_e2e: no source metrics from A" >&2; exit 1; }
ok=1
diff "$T/a.txt" "$T/b.txt" >"$T/ab.diff" || ok=0
diff "$T/a.txt" "$T/c.txt" >"$T/ac.diff" || ok=0
if [ "$ok" = 1 ]; then
  echo "restart_parity_e2e: OK ($RESTARTS restarts of B, $(grep -c . "$T/a.txt") source series equal on A, B, C)"
  exit 0
fi
echo "restart_parity_e2e: FAILED: per-source state differs (< never restarted A, > B restarted / C never restarted)"
echo "--- A vs B"; cat "$T/ab.diff"
echo "--- A vs C"; cat "$T/ac.diff"
exit 1
