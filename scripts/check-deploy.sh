#!/usr/bin/env bash
# Lints deploy/ (issue #8): everything that can be checked without a cluster,
# a container engine or a network.
#
#   bash scripts/check-deploy.sh            # BUILD_DIR=build by default
#
# Checks (each prints PASS, FAIL or SKIP with the reason):
#   yaml        every deploy/**/*.yaml|*.yml parses (Debian python3-yaml)
#   k8s         every manifest has apiVersion/kind/metadata.name; every
#               kvidx config.yaml embedded in a ConfigMap, and
#               deploy/systemd/config.yaml, pass `kvidx-server --check-config`
#   kustomize   base and every overlay render (`kubectl kustomize`, if kubectl
#               is installed; not a Debian 12 package) and their ConfigMaps pass
#               --check-config
#   shell       bash -n on the reloader sidecar and the deploy test scripts
#   promtool    check rules, test rules (alerts_test.yaml), check config
#   dashboard   Grafana JSON parses, panel ids unique, every target has an expr
#   metrics     the families kvidx-server exports (--print-metric-families)
#               and the README's metric table are the same set; every kvidx_*
#               metric named in alerts.yaml, the dashboard and
#               docs/OPERATIONS.md is exported (histograms may carry
#               _bucket/_sum/_count); label values in matchers (state, result,
#               reason, type, code, method) exist in the code; recording-rule
#               names used are defined in alerts.yaml
#   runbooks    every alert is described in docs/OPERATIONS.md, its
#               runbook_url and the document's own links resolve to headings
#   systemd     systemd-analyze verify (if installed) reports nothing but the
#               binary not being installed on this machine
#   dockerfile  the build stage runs scripts/setup.sh then scripts/build.sh
#               with CMake options that exist; the built-in config passes
#               --check-config; the runtime packages exist
#               (apt-cache, offline) and provide every shared library the built
#               binaries link (ldd + dpkg -S, if built)
# Exit status: 0 if nothing failed, 1 otherwise. CHECK_DEPLOY_STRICT=1 turns
# SKIP into FAIL (CI, once promtool/kubectl availability is settled).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD_DIR=${BUILD_DIR:-build}
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$ROOT/$BUILD_DIR" ;; esac
SERVER_BIN="$BUILD_DIR/bin/kvidx-server"
PY=/usr/bin/python3   # Debian's interpreter: sees python3-yaml (build-notes.md)
STRICT=${CHECK_DEPLOY_STRICT:-0}

failed=0
pass() { echo "check-deploy: PASS $*"; }
fail() { echo "check-deploy: FAIL $*"; failed=1; }
skip() {
  echo "check-deploy: SKIP $*"
  if [ "$STRICT" = 1 ]; then failed=1; fi
}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/check-deploy.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

have_pyyaml() { [ -x "$PY" ] && "$PY" -c 'import yaml' 2>/dev/null; }

# ---------------------------------------------------------------- yaml
mapfile -t YAMLS < <(find deploy -type f \( -name '*.yaml' -o -name '*.yml' \) | sort)
if ! have_pyyaml; then
  fail "yaml: $PY with the yaml module is required (Debian package python3-yaml)"
else
  if out=$("$PY" - "${YAMLS[@]}" <<'EOF' 2>&1
import sys, yaml
bad = 0
for path in sys.argv[1:]:
    try:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f)]
        if not any(d is not None for d in docs):
            print(f"{path}: empty"); bad += 1
    except Exception as e:
        print(f"{path}: {e}"); bad += 1
sys.exit(1 if bad else 0)
EOF
  ); then
    pass "yaml: ${#YAMLS[@]} files well-formed"
  else
    fail "yaml: $out"
  fi
fi

# ------------------------------------------------- kvidx config checker
# Writes every kvidx config.yaml found in the given YAML streams to
# $TMP/cfg-N.yaml and prints "N origin" lines.
extract_configs() {
  "$PY" - "$TMP" "$@" <<'EOF'
import sys, yaml
out, paths = sys.argv[1], sys.argv[2:]
n = 0
for path in paths:
    with open(path) as f:
        for doc in yaml.safe_load_all(f):
            if not isinstance(doc, dict) or doc.get("kind") != "ConfigMap":
                continue
            data = doc.get("data") or {}
            if "config.yaml" in data:
                n += 1
                with open(f"{out}/cfg-{n}.yaml", "w") as g:
                    g.write(data["config.yaml"])
                origin = "rendered" if path.startswith(out) else path
                print(n, f"{origin}: ConfigMap {doc['metadata']['name']}")
EOF
}
check_configs() {  # label, yaml files...
  local label=$1; shift
  if [ ! -x "$SERVER_BIN" ]; then
    skip "$label: $SERVER_BIN not built (configs not checked)"
    return
  fi
  local list n origin ok=0 bad=0
  rm -f "$TMP"/cfg-*.yaml
  list=$(extract_configs "$@") || { fail "$label: cannot extract configs"; return; }
  while read -r n origin; do
    [ -n "$n" ] || continue
    if msg=$("$SERVER_BIN" --config "$TMP/cfg-$n.yaml" --check-config 2>&1); then
      ok=$((ok + 1)); echo "  $origin: ${msg#*: }"
    else
      bad=$((bad + 1)); fail "$label: $origin: $msg"
    fi
  done <<<"$list"
  [ "$bad" -eq 0 ] && pass "$label: $ok embedded kvidx config(s) pass --check-config"
}

# ---------------------------------------------------------------- k8s
if have_pyyaml; then
  mapfile -t K8S < <(find deploy/k8s -type f -name '*.yaml' ! -name 'kustomization.yaml' | sort)
  if out=$("$PY" - "${K8S[@]}" <<'EOF' 2>&1
import sys, yaml
bad = n = 0
for path in sys.argv[1:]:
    with open(path) as f:
        for doc in yaml.safe_load_all(f):
            if doc is None or isinstance(doc, list):   # JSON6902 patch files are lists
                continue
            n += 1
            for key in ("apiVersion", "kind"):
                if not doc.get(key):
                    print(f"{path}: a document without {key}"); bad += 1
            if not (doc.get("metadata") or {}).get("name"):
                print(f"{path}: {doc.get('kind')} without metadata.name"); bad += 1
            if doc.get("kind") == "StatefulSet":
                spec = doc["spec"]["template"]["spec"]
                vols = {v["name"] for v in spec.get("volumes", [])}
                vols |= {t["metadata"]["name"] for t in doc["spec"].get("volumeClaimTemplates", [])}
                for c in spec["containers"]:
                    for m in c.get("volumeMounts", []):
                        if m["name"] not in vols:
                            print(f"{path}: container {c['name']} mounts unknown volume {m['name']}"); bad += 1
print(f"{n} manifests")
sys.exit(1 if bad else 0)
EOF
  ); then
    pass "k8s: ${out##*$'\n'} have apiVersion/kind/name, mounts resolve"
  else
    fail "k8s: $out"
  fi
  check_configs "k8s" "${K8S[@]}" deploy/systemd/*.yaml 2>/dev/null
  # deploy/systemd/config.yaml is a bare kvidx config, not a ConfigMap.
  if [ -x "$SERVER_BIN" ] && [ -f deploy/systemd/config.yaml ]; then
    if msg=$("$SERVER_BIN" --config deploy/systemd/config.yaml --check-config 2>&1); then
      pass "systemd config: $msg"
    else
      fail "systemd config: $msg"
    fi
  fi
fi

# ---------------------------------------------------------------- kustomize
if command -v kubectl >/dev/null 2>&1 && kubectl kustomize --help >/dev/null 2>&1; then
  for dir in deploy/k8s/base deploy/k8s/overlays/*/; do
    dir=${dir%/}
    [ -f "$dir/kustomization.yaml" ] || continue
    name=$(echo "$dir" | tr '/' '_')
    if kubectl kustomize "$dir" >"$TMP/$name.yaml" 2>"$TMP/$name.err"; then
      count=$(grep -c '^kind:' "$TMP/$name.yaml")
      pass "kustomize: $dir renders $count objects"
      have_pyyaml && check_configs "kustomize $dir" "$TMP/$name.yaml"
    else
      fail "kustomize: $dir: $(cat "$TMP/$name.err")"
    fi
  done
else
  skip "kustomize: kubectl not installed (not a Debian 12 package); overlays not rendered"
fi

# ---------------------------------------------------------------- shell
shell_ok=1
for f in deploy/k8s/base/config-reloader.sh tests/deploy/*.sh scripts/check-deploy.sh; do
  [ -f "$f" ] || continue
  if ! msg=$(bash -n "$f" 2>&1); then fail "shell: $f: $msg"; shell_ok=0; fi
done
[ "$shell_ok" = 1 ] && pass "shell: bash -n clean"

# ---------------------------------------------------------------- promtool
if command -v promtool >/dev/null 2>&1; then
  if out=$(promtool check rules deploy/prometheus/alerts.yaml 2>&1); then
    pass "promtool check rules: $(echo "$out" | grep -o 'SUCCESS: [0-9]* rules found')"
  else
    fail "promtool check rules: $out"
  fi
  if [ -f deploy/prometheus/alerts_test.yaml ]; then
    if out=$(cd deploy/prometheus && promtool test rules alerts_test.yaml 2>&1); then
      pass "promtool test rules: alerts_test.yaml SUCCESS"
    else
      fail "promtool test rules: $out"
    fi
  fi
  if out=$(promtool check config deploy/prometheus/prometheus.yml 2>&1); then
    pass "promtool check config: deploy/prometheus/prometheus.yml"
  else
    fail "promtool check config: $out"
  fi
else
  fail "promtool: not installed (Debian package prometheus)"
fi

# ---------------------------------------------------------------- dashboard
DASH=deploy/grafana/kvidx-dashboard.json
if [ -x "$PY" ] && "$PY" -m json.tool "$DASH" >/dev/null 2>"$TMP/json.err"; then
  if out=$("$PY" - "$DASH" <<'EOF' 2>&1
import json, sys
d = json.load(open(sys.argv[1]))
bad = []
for key in ("title", "uid", "panels", "schemaVersion"):
    if key not in d: bad.append(f"missing {key}")
ids = [p.get("id") for p in d.get("panels", [])]
if len(ids) != len(set(ids)): bad.append("duplicate panel ids")
n = 0
for p in d.get("panels", []):
    if p.get("type") == "row": continue
    g = p.get("gridPos", {})
    if g.get("x", 0) + g.get("w", 0) > 24: bad.append(f"panel {p.get('title')}: wider than the grid")
    for t in p.get("targets", []):
        n += 1
        if not t.get("expr"): bad.append(f"panel {p.get('title')}: target without expr")
print("\n".join(bad) if bad else f"{len(ids)} panels, {n} queries")
sys.exit(1 if bad else 0)
EOF
  ); then
    pass "dashboard: $DASH valid JSON, $out"
  else
    fail "dashboard: $out"
  fi
else
  fail "dashboard: $DASH: $(cat "$TMP/json.err" 2>/dev/null || echo "$PY missing")"
fi

# ---------------------------------------------------------------- metrics
# The exported families come from the binary's own tables
# (kvidx-server --print-metric-families), not from reading source files.
LABEL_SRCS=(index/source_state.h ingest/source_stats.cc ingest/decoder.cc ingest/decoder.h ingest/event.h
            server/rpc_metrics.cc server/node.cc)
if [ -x "$PY" ] && [ -x "$SERVER_BIN" ]; then
  "$SERVER_BIN" --print-metric-families > "$TMP/families.tsv"
  if out=$("$PY" - "$ROOT" "$TMP/families.tsv" <<'EOF' 2>&1
import json, os, re, sys
root = sys.argv[1]
families = [l.split("\t") for l in open(sys.argv[2]).read().splitlines() if l]
os.chdir(root)
label_srcs = ["index/source_state.h", "ingest/source_stats.cc", "ingest/decoder.cc", "ingest/decoder.h",
              "ingest/event.h", "server/rpc_metrics.cc", "server/node.cc"]
known = {f[0] for f in families}
hist = {f[0] for f in families if f[1] == "histogram"}
lits = set()
for p in label_srcs:
    if os.path.exists(p):
        lits |= set(re.findall(r'"([A-Za-z0-9_]+)"', open(p).read()))

files = ["deploy/prometheus/alerts.yaml", "deploy/grafana/kvidx-dashboard.json", "docs/OPERATIONS.md"]
texts = {f: open(f).read() for f in files if os.path.exists(f)}
if "deploy/grafana/kvidx-dashboard.json" in texts:   # only the queries, unescaped
    d = json.loads(texts["deploy/grafana/kvidx-dashboard.json"])
    exprs = [t["expr"] for p in d["panels"] for t in p.get("targets", [])]
    exprs += [v.get("definition", "") for v in d.get("templating", {}).get("list", [])]
    texts["deploy/grafana/kvidx-dashboard.json"] = "\n".join(exprs)
records = set(re.findall(r'^\s*-?\s*record:\s*(\S+)', open("deploy/prometheus/alerts.yaml").read(), re.M))

bad, used = [], set()
for f, t in texts.items():
    for m in re.findall(r'(?<![A-Za-z0-9_:])(kvidx_[a-z0-9_]+)(?![A-Za-z0-9_:])', t):
        if m.endswith("_test"):   # test binaries (kvidx_deploy_test), not metrics
            continue
        base = m
        for suf in ("_bucket", "_sum", "_count"):
            if m.endswith(suf) and m[: -len(suf)] in hist:
                base = m[: -len(suf)]
        if base not in known:
            bad.append(f"{f}: {m}: no such metric (kvidx-server --print-metric-families)")
        used.add(base)
    for r in re.findall(r'(?<![A-Za-z0-9_:])([a-z_]+:kvidx_[a-z0-9_]+:[a-z0-9_]+)', t):
        if r not in records:
            bad.append(f"{f}: {r}: recording rule not defined in alerts.yaml")
    # Label matchers: values must be strings the code emits.
    if f.endswith((".yaml", ".json")):
        for lab, op, val in re.findall(r'\b(state|result|reason|type|code|method)\s*(=~|!~|!=|=)\s*"([^"]*)"', t):
            for v in val.split("|"):
                if v and re.fullmatch(r'[A-Za-z0-9_]+', v) and v not in lits:
                    bad.append(f"{f}: {lab}{op}\"{val}\": value {v!r} never emitted by the code")
# The README's metric table lists every exported family, and only those.
table = set()
for line in open("README.md").read().splitlines():
    if line.startswith("| `kvidx_"):
        table |= set(re.findall(r'`(kvidx_[a-z0-9_]+)`', line.split("|")[1]))
for m in sorted(known - table):
    bad.append(f"README.md: metric table: {m} is exported but not documented")
for m in sorted(table - known):
    bad.append(f"README.md: metric table: {m} is documented but not exported")
if bad:
    print("\n".join(sorted(set(bad))))
    sys.exit(1)
print(f"{len(known)} families exported, all in the README table and it lists no other; "
      f"{len(used)} referenced by rules, dashboard and docs, all exported "
      f"(histograms: {', '.join(sorted(hist))}); {len(records)} recording rules")
EOF
  ); then
    pass "metrics: $out"
  else
    fail "metrics: $out"
  fi
elif [ ! -x "$SERVER_BIN" ]; then
  skip "metrics: $SERVER_BIN not built"
fi

# ---------------------------------------------------------------- runbooks
if [ -x "$PY" ] && [ -f docs/OPERATIONS.md ]; then
  if out=$("$PY" - <<'EOF' 2>&1
import re, sys
doc = open("docs/OPERATIONS.md").read()
def slug(h):   # GitHub's heading anchors
    h = re.sub(r"[^\w\- ]", "", h.strip().lower())
    return h.replace(" ", "-")
anchors = {slug(m) for m in re.findall(r"^#+\s+(.*)$", doc, re.M)}
bad = []
for a in re.findall(r'runbook_url:\s*"docs/OPERATIONS\.md#([^"]+)"', open("deploy/prometheus/alerts.yaml").read()):
    if a not in anchors: bad.append(f"alerts.yaml runbook_url #{a}: no such heading in docs/OPERATIONS.md")
for a in re.findall(r"\]\(#([^)]+)\)", doc):
    if a not in anchors: bad.append(f"docs/OPERATIONS.md link #{a}: no such heading")
alerts = set(re.findall(r"^\s*- alert:\s*(\S+)", open("deploy/prometheus/alerts.yaml").read(), re.M))
for a in sorted(alerts):
    if a not in doc: bad.append(f"alert {a} is not described in docs/OPERATIONS.md")
print("\n".join(bad) if bad else f"{len(alerts)} alerts described, runbook links and in-page links resolve")
sys.exit(1 if bad else 0)
EOF
  ); then
    pass "runbooks: $out"
  else
    fail "runbooks: $out"
  fi
fi

# ---------------------------------------------------------------- systemd
UNIT=deploy/systemd/kvidx-server.service
if command -v systemd-analyze >/dev/null 2>&1; then
  systemd-analyze verify "$UNIT" >/dev/null 2>"$TMP/sd.err"
  # The binaries are not installed on a build machine; anything else is real.
  if grep -v -e 'is not executable: No such file or directory' "$TMP/sd.err" | grep -q .; then
    fail "systemd: $(grep -v -e 'is not executable' "$TMP/sd.err" | sort -u)"
  else
    pass "systemd: systemd-analyze verify $UNIT (only the uninstalled binary reported)"
  fi
else
  skip "systemd: systemd-analyze not installed"
fi

# ---------------------------------------------------------------- dockerfile
DF=deploy/Dockerfile
df_ok=1
if ! grep -q 'bash scripts/setup.sh' "$DF" || ! grep -q 'bash scripts/build.sh' "$DF"; then
  fail "dockerfile: the build stage must run scripts/setup.sh and scripts/build.sh"; df_ok=0
fi
for opt in $(grep -o -- '-D[A-Z_]*=' "$DF" | sed 's/^-D//; s/=$//' | sort -u); do
  if ! grep -q "option($opt " CMakeLists.txt; then
    fail "dockerfile: CMake option $opt does not exist in CMakeLists.txt"; df_ok=0
  fi
done
# The image's built-in config (the single-quoted lines printf writes).
if [ -x "$SERVER_BIN" ]; then
  msg=""
  sed -n "/^RUN printf/,/config.yaml/p" "$DF" | grep -o "^ *'[^']*'" | sed "s/^ *'//; s/'\$//" >"$TMP/image-config.yaml"
  if [ -s "$TMP/image-config.yaml" ] && msg=$("$SERVER_BIN" --config "$TMP/image-config.yaml" --check-config 2>&1); then
    pass "dockerfile: built-in /etc/kvidx/config.yaml: ${msg#*: }"
  else
    fail "dockerfile: built-in config: ${msg:-not found}"; df_ok=0
  fi
fi
# Runtime packages: the continuation lines of the runtime apt-get install.
mapfile -t RT_PKGS < <(awk '/^FROM .* AS runtime/{rt=1} rt && /apt-get install/{on=1; next} on && /&&/{on=0} on' "$DF" \
  | tr ' \\' '\n\n' | grep -E '^[a-z0-9][a-z0-9.+-]+$' | sort -u)
if [ ${#RT_PKGS[@]} -eq 0 ]; then
  fail "dockerfile: no runtime packages found"; df_ok=0
elif command -v apt-cache >/dev/null 2>&1 && ls /var/lib/apt/lists/*Packages* >/dev/null 2>&1; then
  for p in "${RT_PKGS[@]}"; do
    apt-cache show --no-all-versions "$p" >/dev/null 2>&1 || { fail "dockerfile: package $p unknown to apt"; df_ok=0; }
  done
  if [ -x "$SERVER_BIN" ] && command -v dpkg >/dev/null 2>&1; then
    closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
                --no-replaces --no-enhances "${RT_PKGS[@]}" 2>/dev/null | grep -v '^ ' | sed 's/:.*//' | sort -u)
    for bin in "$SERVER_BIN" "$BUILD_DIR/bin/kvidx"; do
      [ -x "$bin" ] || continue
      for lib in $(ldd "$bin" | awk '/=> \//{print $3}'); do
        pkg=$(dpkg -S "$(readlink -f "$lib")" 2>/dev/null | head -1 | cut -d: -f1)
        [ -n "$pkg" ] || pkg=$(dpkg -S "$lib" 2>/dev/null | head -1 | cut -d: -f1)
        [ -n "$pkg" ] || continue
        if ! grep -qx "$pkg" <<<"$closure"; then
          fail "dockerfile: $(basename "$bin") links $lib from $pkg, which the runtime stage does not install"; df_ok=0
        fi
      done
    done
  else
    skip "dockerfile: $SERVER_BIN not built (shared libraries not checked)"
  fi
else
  skip "dockerfile: no apt lists (packages not checked)"
fi
[ "$df_ok" = 1 ] && pass "dockerfile: setup.sh + build.sh, ${#RT_PKGS[@]} runtime packages exist and cover the binaries' libraries"

echo
if [ "$failed" -ne 0 ]; then
  echo "check-deploy: FAILED"
  exit 1
fi
echo "check-deploy: OK"
