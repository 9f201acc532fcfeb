#!/usr/bin/env bash
# The longer fidelity run recorded in docs/FIDELITY.md: kvidx-server and
# kvidx-sim as separate processes on this machine, one fresh server per
# scenario, the engines in the server's config (kvidx-sim --print-config) so
# that a kvidx restart keeps them.
#
#   bash tools/sim/fidelity_run.sh            # after scripts/build.sh
#   BIN=build-x/bin REQUESTS=20000 bash tools/sim/fidelity_run.sh
#
# Env: BIN (build/bin), REQUESTS per scenario (100000), REPLICAS (8), DP (2),
# RESTART_SECONDS: traffic time of the kvidx-restart scenario (40), OUT: a
# directory to keep each scenario's kvidx-sim --json report in, ONLY: run
# only the scenario of this name.
# Prints one line per scenario and exits non-zero if any scenario's
# fidelity on EXACT sources is below 100% or its expectations fail.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/bin}
REQUESTS=${REQUESTS:-100000}
REPLICAS=${REPLICAS:-8}
DP=${DP:-2}
RESTART_SECONDS=${RESTART_SECONDS:-40}
OUT=${OUT:-}
ONLY=${ONLY:-}
CHECK=$((REQUESTS / 10))

TMP=$(mktemp -d -t kvidx-fidelity-XXXXXX)
SERVER_PID=""
stop_server() {
  if [ -n "$SERVER_PID" ]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
  fi
}
trap 'stop_server; rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 12000))
    port_busy "$p" || { echo "$p"; return; }
  done
}
echo "token-$RANDOM$RANDOM$RANDOM" >"$TMP/token"

# start_server DIR: (re)starts kvidx-server on DIR/kvidx.yaml and waits until
# it answers. (Not until SERVING: that waits for the first replay from every
# configured engine, and the simulated engines start after the server.)
start_server() {
  "$BIN/kvidx-server" --config "$1/kvidx.yaml" >>"$1/server.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 150); do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "kvidx-server exited:" >&2
      tail -5 "$1/server.log" >&2
      return 1
    fi
    if "$BIN/kvidx" status --server "127.0.0.1:$GRPC" --json 2>/dev/null | grep -q '"version"'; then return 0; fi
    sleep 0.2
  done
  echo "kvidx-server not serving" >&2
  return 1
}

# field JSON KEY: the first number after "KEY": in JSON (no jq needed).
field() { grep -o "\"$2\": [0-9.e+-]*" "$1" | head -1 | sed 's/.*: //'; }

FAILED=0
printf '%-24s %8s %6s %6s %9s %9s %8s %7s %5s %5s %8s %s\n' scenario requests hit_r hit_kv fidelity exact_cmp degr_cmp dropped lost exp_l events/s "sources at the end"
# scenario NAME EXPECT SIM_ARGS...
#   EXPECT: exact (nothing lost) | degraded (lost == dropped) | restart (kvidx restarted mid-run, nothing lost)
scenario() {
  local name=$1 expect=$2
  shift 2
  if [ -n "$ONLY" ] && [ "$ONLY" != "$name" ]; then return; fi
  local dir=$TMP/$name
  mkdir -p "$dir"
  GRPC=$(free_port)
  local metrics base
  metrics=$(free_port)
  base=$((10000 + (RANDOM % 90) * 100))  # the engines bind base.. (below the ranges above)
  {
    echo "grpc: {listen: \"127.0.0.1:$GRPC\", admin_token_file: \"$TMP/token\"}"
    echo "metrics: {listen: \"127.0.0.1:$metrics\"}"
    echo "data_dir: \"$dir/data\""
    echo "log: {level: warn}"
    "$BIN/kvidx-sim" --replicas "$REPLICAS" --dp "$DP" --base-port "$base" "$@" --print-config
  } >"$dir/kvidx.yaml"
  start_server "$dir"
  local args=(--server "127.0.0.1:$GRPC" --token-file "$TMP/token" --replicas "$REPLICAS" --dp "$DP"
              --base-port "$base" --samples 500 --json --quiet "$@")
  local rc=0
  if [ "$expect" = restart ]; then
    # Traffic at a fixed rate; kvidx is stopped (SIGTERM: final snapshot)
    # a third of the way in and started again on the same data dir 1 s later.
    "$BIN/kvidx-sim" "${args[@]}" >"$dir/report.json" 2>"$dir/sim.log" &
    local sim=$!
    sleep $((RESTART_SECONDS / 3 + 2))
    stop_server
    sleep 1
    start_server "$dir"
    wait "$sim" || rc=$?
  else
    "$BIN/kvidx-sim" "${args[@]}" >"$dir/report.json" 2>"$dir/sim.log" || rc=$?
  fi
  stop_server
  local r=$dir/report.json
  if [ ! -s "$r" ]; then
    echo "$name: kvidx-sim failed (rc $rc):"; cat "$dir/sim.log"
    FAILED=1
    return
  fi
  local hr hk states req pct cmp_exact cmp_degr dropped lost expected evs
  hr=$(grep -o '"hit_rate_random": [0-9.a-z]*' "$r" | sed 's/.*: //')
  hk=$(grep -o '"hit_rate_kvidx": [0-9.a-z]*' "$r" | sed 's/.*: //')
  req=$(grep -o '"requests": [0-9]*, "traffic_seconds"' "$r" | sed 's/"requests": //; s/,.*//')
  pct=$(field "$r" percent)
  cmp_exact=$(field "$r" comparisons_exact)
  cmp_degr=$(field "$r" comparisons_degraded)
  dropped=$(grep -o '"faults": {"batches_dropped": [0-9]*' "$r" | sed 's/.*: //')
  lost=$(field "$r" batches_lost)
  expected=$(field "$r" expected_lost)
  evs=$(field "$r" events_per_second)
  states=$(grep -o '"sources_by_state": {[^}]*}' "$r" | sed 's/"sources_by_state": //; s/[" {}]//g')
  [ "$hr" != null ] || hr=-
  [ "$hk" != null ] || hk=-
  printf '%-24s %8s %6.6s %6.6s %8s%% %9s %8s %7s %5s %5s %8.0f %s\n' "$name" "$req" "$hr" "$hk" \
    "$pct" "$cmp_exact" "$cmp_degr" "$dropped" "$lost" "$expected" "$evs" "$states"
  if [ -n "$OUT" ]; then mkdir -p "$OUT" && cp "$r" "$OUT/$name.json"; fi
  if [ "$rc" != 0 ]; then FAILED=1; echo "  ^ kvidx-sim exit $rc: fidelity below 100% on EXACT sources (see $dir)"; fi
  if [ "$expect" = degraded ] && [ "$lost" != "$expected" ]; then FAILED=1; echo "  ^ lost $lost != expected $expected"; fi
  if [ "$expect" != degraded ] && [ "$lost" != 0 ]; then FAILED=1; echo "  ^ lost $lost batches"; fi
  if [ "$expect" = restart ]; then
    echo "  (routing queries that failed while kvidx was down: $(field "$r" routing_errors))"
  fi
  if grep -q '"replicas_stopped": [1-9]' "$r"; then
    echo "  (scale steps $(field "$r" steps), DNS publications $(field "$r" dns_publications), replicas stopped" \
      "$(field "$r" replicas_stopped), their sources gone $(field "$r" removal_wait_seconds) s after the traffic;" \
      "$(grep -o '"removal_error": "[^"]*"' "$r")"
  fi
}

scenario no-loss                  exact    --routing both --requests "$REQUESTS" --check-every "$CHECK"
scenario drops-1pct-replay        exact    --routing kvidx --requests "$REQUESTS" --check-every "$CHECK" --drop-rate 0.01
scenario drops-5pct-replay        exact    --routing kvidx --requests "$REQUESTS" --check-every "$CHECK" --drop-rate 0.05
scenario drops-1pct-no-replay     degraded --routing kvidx --requests "$REQUESTS" --check-every "$CHECK" --drop-rate 0.01 --no-replay
scenario drops-1pct-send-error    degraded --routing kvidx --requests "$REQUESTS" --check-every "$CHECK" --drop-rate 0.01 --drop-mode send-error
scenario engine-restart           exact    --routing kvidx --requests "$REQUESTS" --check-every "$CHECK" --restart-at $((REQUESTS / 2)) --drop-rate 0.01
scenario old-era-bytes-xxhash     exact    --routing kvidx --requests "$REQUESTS" --check-every "$CHECK" --drop-rate 0.01 \
  --wire-era array-v3-norank --bytes-hashes --replay-format old --hash-algo xxhash --hash-seed 1234
# The fleet published through DNS (dnsmasq started by kvidx-sim), followed
# by the server's discovery provider alone, scaled 2 -> 5 -> 1 under traffic.
DNS_PORT=$(free_port)
scenario dns-scale-2-5-1          exact    --routing kvidx --requests "$REQUESTS" --check-every "$CHECK" --replicas 2 \
  --dns-port "$DNS_PORT" --scale-at $((REQUESTS / 3)):5,$((REQUESTS * 2 / 3)):1 --grace-ms 5000
scenario kvidx-restart            restart  --routing kvidx --duration "$RESTART_SECONDS" --rate 1500 --drop-rate 0.01
exit "$FAILED"
