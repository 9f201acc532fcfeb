#!/usr/bin/env bash
# Checks the include rules of docs/ARCHITECTURE.md ("Layers"): each library
# includes only from itself and the layers below it, the RPC-free libraries
# include nothing of gRPC or the generated proto code, and no production
# file includes test-only code. Reads #include lines only; no build needed.
set -uo pipefail
cd "$(dirname "$0")/.."

failed=0
# violations FILES... : prints "file:line: include" for each include of a
# project header whose folder is not in $ALLOWED (a regex of prefixes), and
# of any header matching $FORBIDDEN.
violations() {
  local f
  for f in "$@"; do
    [ -f "$f" ] || continue
    grep -Hn '^#include ' "$f" | while IFS= read -r line; do
      inc=${line#*#include }
      case "$inc" in
        \"*)
          path=${inc#\"}; path=${path%%\"*}
          if ! [[ "$path" =~ ^($ALLOWED) ]]; then echo "$line"; continue; fi
          ;;
      esac
      if [ -n "$FORBIDDEN" ] && [[ "$inc" =~ $FORBIDDEN ]]; then echo "$line"; fi
    done
  done
}

check() {  # check NAME ALLOWED FORBIDDEN FILES...
  local name=$1
  ALLOWED=$2 FORBIDDEN=$3
  shift 3
  local out
  out=$(violations "$@")
  if [ -n "$out" ]; then
    echo "check-layers: FAIL $name may include only ($ALLOWED)${FORBIDDEN:+ and nothing matching $FORBIDDEN}:"
    echo "$out" | sed 's/^/  /'
    failed=1
  else
    echo "check-layers: PASS $name ($# files)"
  fi
}

src() { find "$@" -type f \( -name '*.h' -o -name '*.cc' \) 2>/dev/null | sort; }
prod() { src "$@" | grep -v '/testing/'; }

RPC='grpc|kvidx/v1/|google/protobuf'
mapfile -t BASE < <(src base)
mapfile -t INDEX < <(prod index)
mapfile -t INGEST < <(prod ingest)
mapfile -t NODE < <(ls server/node.* server/node_metrics.h server/query_engine.* server/prefix_query.h server/route_*.* \
                      server/snapshot_*.* server/config.* server/prompt_encoder.* 2>/dev/null)
mapfile -t SERVER < <(prod server | grep -v '^server/chat/')
mapfile -t CHAT < <(prod server/chat)
mapfile -t TOKENIZER < <(prod server/tokenizer)

check base 'base/' "$RPC|zmq|rocksdb" "${BASE[@]}"
check index 'base/|index/' "$RPC|zmq|rocksdb|msgpack" "${INDEX[@]}"
check ingest 'base/|index/|ingest/' "$RPC|rocksdb|ingest/testing/" "${INGEST[@]}"
check "server (RPC-free: node, queries, snapshots, config)" 'base/|index/|ingest/|server/' \
  "$RPC|server/(kv_index_service|admin_service|proto_convert|server|metrics_endpoint|rpc_metrics|credentials|request_scan)\.h" \
  "${NODE[@]}"
check server 'base/|index/|ingest/|server/|kvidx/v1/' '/testing/' "${SERVER[@]}"
# The tokenizer stands on base/ alone (PCRE2, ICU, nlohmann_json outside).
check tokenizer 'base/|server/tokenizer/' "$RPC|zmq|rocksdb|msgpack" "${TOKENIZER[@]}"
# The chat-template renderer stands alone: base/ and itself (plus nlohmann).
check chat 'base/|server/chat/' "$RPC|zmq|rocksdb|/testing/" "${CHAT[@]}"

# CMake lists sources explicitly: a .cc file no CMakeLists.txt names would
# silently not be built (or tested).
unlisted=()
while IFS= read -r f; do
  dir=$(dirname "$f")
  name=$(basename "$f")
  listed=0
  while [ "$dir" != "." ]; do
    if [ -f "$dir/CMakeLists.txt" ] && grep -qE "(^|[[:space:]/])${name//./\\.}([[:space:])]|$)" "$dir/CMakeLists.txt"; then
      listed=1
      break
    fi
    dir=$(dirname "$dir")
  done
  [ "$listed" -eq 1 ] || unlisted+=("$f")
done < <(git ls-files '*.cc' 2>/dev/null || find . -name '*.cc' -not -path './build*' | sed 's|^\./||')
if [ ${#unlisted[@]} -gt 0 ]; then
  echo "check-layers: FAIL sources no CMakeLists.txt lists: ${unlisted[*]}"
  failed=1
else
  echo "check-layers: PASS every .cc file is listed in a CMakeLists.txt"
fi

[ "$failed" -eq 0 ] && echo "check-layers: OK" || echo "check-layers: FAILED"
exit "$failed"
