#!/usr/bin/env bash
# End to end: a real Prometheus scrapes a running kvidx-server and loads
# deploy/prometheus/alerts.yaml (issue #8).
#
#   BUILD_DIR=build bash tests/deploy/prometheus_e2e.sh
#
# 1. starts $BUILD_DIR/bin/kvidx-server (loopback, free ports, data in a temp
#    dir, one model, snapshots every second);
# 3. starts `prometheus` (Debian package prometheus) scraping it every second
#    with alerts.yaml as its rule file;
# 4. waits until /api/v1/targets shows the target up and /api/v1/rules shows
#    every rule of alerts.yaml loaded and evaluated with health "ok";
# 5. traffic: FindPrefix calls with the kvidx CLI and, if
#    $BUILD_DIR/bin/kvidx-sim exists, a small simulated fleet registered
#    through the admin API with requests routed by kvidx, so that ingest,
#    index and query metrics move between scrapes;
# 6. queries kvidx_serving (expects 1), a recording rule fed by the
#    histogram, ingest counters (with kvidx-sim), and every query of the
#    Grafana dashboard (each must be accepted by Prometheus);
# 7. stops everything it started, by pid.
# Prints SKIP and exits 0 when prometheus is not installed. Takes ~15 s;
# gives up after 50 s.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
BUILD_DIR=${BUILD_DIR:-build}
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$ROOT/$BUILD_DIR" ;; esac
SERVER="$BUILD_DIR/bin/kvidx-server"
CLI="$BUILD_DIR/bin/kvidx"
SIM=${KVIDX_SIM-$BUILD_DIR/bin/kvidx-sim}   # KVIDX_SIM= (empty): no simulated fleet
PROMETHEUS=${PROMETHEUS:-$(command -v prometheus || true)}
PY=/usr/bin/python3
DEADLINE=$(( $(date +%s) + 50 ))

log() { echo "prometheus_e2e: $*"; }
die() { log "FAIL: $*"; exit 1; }

if [ -z "$PROMETHEUS" ] || [ ! -x "$PROMETHEUS" ]; then
  log "SKIP: prometheus not installed (Debian package prometheus)"
  exit 0
fi
[ -x "$SERVER" ] || die "$SERVER not built"
[ -x "$PY" ] || die "$PY required (JSON parsing)"
command -v curl >/dev/null || die "curl required"

T=$(mktemp -d "${TMPDIR:-/tmp}/kvidx-prom-e2e.XXXXXX")
SERVER_PID="" PROM_PID="" SIM_PID="" CLI_PID=""
stop() {  # pid: SIGTERM, wait up to 10 s, then SIGKILL
  local pid=$1 i
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  local rc=$?
  stop "$CLI_PID"; stop "$SIM_PID"; stop "$PROM_PID"; stop "$SERVER_PID"
  if [ "$rc" -ne 0 ]; then
    for f in server.log prometheus.log sim.log; do
      [ -s "$T/$f" ] && { echo "--- $f (last 20 lines)"; tail -n 20 "$T/$f"; }
    done
  fi
  rm -rf "$T"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
time_left() { [ "$(date +%s)" -lt "$DEADLINE" ]; }

# ---- 1. kvidx-server
echo "e2e-token-$$" > "$T/token"
cat > "$T/kvidx.yaml" <<EOF
grpc: {listen: "127.0.0.1:0", admin_token_file: "$T/token"}
metrics: {listen: "127.0.0.1:0"}
data_dir: "$T/data"
snapshot: {interval_seconds: 1, sync: false}
models:
  - {name: sim-model}
EOF
"$SERVER" --config "$T/kvidx.yaml" >"$T/server.log" 2>&1 &
SERVER_PID=$!
GPORT="" MPORT=""
while time_left; do
  if line=$(grep -m1 'kvidx-server listening' "$T/server.log" 2>/dev/null); then
    GPORT=$(sed -n 's/.*(port \([0-9]*\).*/\1/p' <<<"$line")
    MPORT=$(sed -n 's/.*metrics \([0-9]*\).*/\1/p' <<<"$line")
    break
  fi
  kill -0 "$SERVER_PID" 2>/dev/null || die "kvidx-server exited"
  sleep 0.1
done
[ -n "$GPORT" ] && [ -n "$MPORT" ] || die "kvidx-server did not report its ports"
log "kvidx-server pid $SERVER_PID: grpc 127.0.0.1:$GPORT, metrics 127.0.0.1:$MPORT"
curl -fsS "http://127.0.0.1:$MPORT/metrics" | grep -q '^kvidx_serving ' || die "/metrics has no kvidx_serving"

# ---- 3. prometheus
PPORT=""
for attempt in 1 2 3; do
  PPORT=$(free_port)
  cat > "$T/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - "$ROOT/deploy/prometheus/alerts.yaml"
scrape_configs:
  - job_name: kvidx
    static_configs:
      - targets: ["127.0.0.1:$MPORT"]
EOF
  "$PROMETHEUS" --config.file="$T/prometheus.yml" --web.listen-address="127.0.0.1:$PPORT" \
    --storage.tsdb.path="$T/tsdb" --log.level=warn >"$T/prometheus.log" 2>&1 &
  PROM_PID=$!
  up=0
  while time_left; do
    if curl -fsS "http://127.0.0.1:$PPORT/-/ready" >/dev/null 2>&1; then up=1; break; fi
    kill -0 "$PROM_PID" 2>/dev/null || break
    sleep 0.2
  done
  [ "$up" = 1 ] && break
  stop "$PROM_PID"; PROM_PID=""
  log "prometheus did not come up on port $PPORT (attempt $attempt)"
done
[ -n "$PROM_PID" ] || die "prometheus would not start"
log "prometheus pid $PROM_PID ($("$PROMETHEUS" --version 2>&1 | head -1 | cut -d' ' -f1-3)) on 127.0.0.1:$PPORT"

api() { curl -fsS --get "http://127.0.0.1:$PPORT/api/v1/$1" "${@:2}"; }

# ---- 4. target up, rules loaded and healthy
expected_rules=$(grep -cE '^\s*- (record|alert):' deploy/prometheus/alerts.yaml)
state=""
while time_left; do
  targets=$(api targets 2>/dev/null || true)
  rules=$(api rules 2>/dev/null || true)
  state=$("$PY" - "$expected_rules" "$targets" "$rules" <<'EOF'
import json, sys
want = int(sys.argv[1])
try:
    t = json.loads(sys.argv[2])["data"]["activeTargets"]
    g = json.loads(sys.argv[3])["data"]["groups"]
except Exception as e:
    print("waiting: API not answering"); sys.exit()
up = [x for x in t if x["labels"].get("job") == "kvidx" and x["health"] == "up"]
rules = [r for grp in g for r in grp["rules"]]
bad = [f'{r["name"]}: {r.get("lastError")}' for r in rules if r.get("health") == "err"]
if bad:
    print("ERROR " + "; ".join(bad)); sys.exit()
ok = [r for r in rules if r.get("health") == "ok"]
if len(up) == 1 and len(rules) == want and len(ok) == want:
    groups = ", ".join(f'{grp["name"]} ({len(grp["rules"])})' for grp in g)
    print(f"READY target {up[0]['scrapeUrl']} up; {len(ok)}/{want} rules loaded, health ok: {groups}")
else:
    print(f"waiting: {len(up)} target(s) up, {len(rules)}/{want} rules loaded, {len(ok)} evaluated ok")
EOF
  )
  case "$state" in READY*|ERROR*) break ;; esac
  sleep 0.5
done
case "$state" in
  READY*) log "${state#READY }" ;;
  ERROR*) die "rule evaluation failed: ${state#ERROR }" ;;
  *) die "timed out: $state" ;;
esac

# ---- 5. traffic, now that every scrape sees counters move
if [ -x "$SIM" ]; then
  "$SIM" --server "127.0.0.1:$GPORT" --token-file "$T/token" --register --replicas 2 --dp 1 \
    --blocks-per-rank 256 --base-port 0 --model sim-model --requests 300 --rate 150 --routing kvidx \
    --system-tokens 32:128 --turn-tokens 16:64 --quiet >"$T/sim.log" 2>&1 &
  SIM_PID=$!
  log "kvidx-sim pid $SIM_PID: 2 simulated engines registered, 300 requests routed by kvidx over ~2 s"
else
  log "no kvidx-sim${SIM:+ at $SIM}: FindPrefix calls through the CLI only"
fi
if [ -x "$CLI" ]; then
  ( for i in $(seq 1 12); do
      "$CLI" query --server "127.0.0.1:$GPORT" --model sim-model --tokens "$(seq -s, "$i" $((i + 47)))" >/dev/null
      sleep 0.25
    done ) &
  CLI_PID=$!
fi

# ---- 6. queries
query() {  # prints the first sample's value of an instant query ("" if none)
  api query --data-urlencode "query=$1" | "$PY" -c '
import json, sys
d = json.load(sys.stdin)
r = d["data"]["result"]
print(r[0]["value"][1] if d["status"] == "success" and r else "")'
}
serving=""
while time_left; do
  serving=$(query 'kvidx_serving{job="kvidx"}')
  [ "$serving" = 1 ] && break
  sleep 0.5
done
[ "$serving" = 1 ] || die "kvidx_serving is '$serving', expected 1"
log "query kvidx_serving{job=\"kvidx\"} = $serving"

# The histogram reaches a recording rule (needs two scrapes with calls).
p99=""
while time_left; do
  p99=$(query 'instance_method:kvidx_grpc_request_duration_seconds:p99_5m{method="FindPrefix"}')
  [ -n "$p99" ] && [ "$p99" != NaN ] && break
  sleep 0.5
done
[ -n "$p99" ] && [ "$p99" != NaN ] || die "recording rule instance_method:kvidx_grpc_request_duration_seconds:p99_5m has no sample"
log "recording rule instance_method:kvidx_grpc_request_duration_seconds:p99_5m{method=\"FindPrefix\"} = $p99"
calls=$(query 'sum(kvidx_grpc_requests_total{method="FindPrefix",code="OK"})')
log "query sum(kvidx_grpc_requests_total{method=\"FindPrefix\",code=\"OK\"}) = $calls"

if [ -n "$SIM_PID" ]; then
  batches=""
  while time_left; do
    batches=$(query 'sum(kvidx_batches_total{job="kvidx"})')
    [ -n "$batches" ] && [ "${batches%%.*}" -gt 0 ] 2>/dev/null && break
    sleep 0.5
  done
  [ -n "$batches" ] && [ "${batches%%.*}" -gt 0 ] 2>/dev/null || die "no ingest: sum(kvidx_batches_total) = '$batches'"
  log "query sum(kvidx_batches_total{job=\"kvidx\"}) = $batches (from kvidx-sim's engines)"
  blocks=$(query 'sum(instance_tier:kvidx_source_blocks:sum{tier="GPU"})')
  log "recording rule sum(instance_tier:kvidx_source_blocks:sum{tier=\"GPU\"}) = ${blocks:-none}"
fi

# Every dashboard query is valid PromQL for this Prometheus.
dash=$("$PY" - "$ROOT/deploy/grafana/kvidx-dashboard.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
for p in d["panels"]:
    for t in p.get("targets", []):
        e = (t["expr"].replace("$__rate_interval", "1m").replace("$__range", "5m")
             .replace("$job", ".*").replace("$instance", ".*").replace("$source", ".*"))
        print(e.replace("\n", " "))
EOF
)
n=0 bad=0
while IFS= read -r q; do
  [ -n "$q" ] || continue
  n=$((n + 1))
  out=$(curl -sS --get "http://127.0.0.1:$PPORT/api/v1/query" --data-urlencode "query=$q")
  if ! grep -q '"status":"success"' <<<"$out"; then
    bad=$((bad + 1)); log "dashboard query rejected: $q -> $out"
  fi
done <<<"$dash"
[ "$bad" -eq 0 ] || die "$bad of $n dashboard queries rejected"
log "all $n dashboard queries accepted by prometheus"

firing=$(api alerts | "$PY" -c '
import json, sys
a = json.load(sys.stdin)["data"]["alerts"]
print(", ".join(sorted({x["labels"]["alertname"] + ":" + x["state"] for x in a})) or "none")')
log "alerts pending/firing now: $firing"

# ---- 7. stop (the trap also does this on failure)
stop "$CLI_PID"; CLI_PID=""
stop "$SIM_PID"; SIM_PID=""
stop "$PROM_PID"; PROM_PID=""
stop "$SERVER_PID"; rc_pid=$SERVER_PID; SERVER_PID=""
log "PASS in $(( 50 - (DEADLINE - $(date +%s)) ))s (kvidx-server pid $rc_pid, prometheus stopped)"
