#!/bin/bash
# kvidx config reloader (sidecar, shareProcessNamespace: true).
#
# kubelet updates a ConfigMap volume in place (an atomic symlink swap, within
# about a minute of the API change; never with subPath mounts). kvidx-server
# re-reads its config file on SIGHUP and applies the engine list without a
# restart (other keys need a restart; it logs the differences). This loop
# polls the file's checksum and, when it changes:
#   1. checks the new file with `kvidx-server --check-config` (a rejected file
#      is logged here and not signalled; the server would also refuse it and
#      keep its engines, but this keeps the reason next to the change);
#   2. sends SIGHUP to the kvidx-server process of this pod (same UID, so no
#      capability is needed).
# Environment: KVIDX_CONFIG (default /etc/kvidx/config.yaml),
# RELOAD_POLL_SECONDS (default 10), KVIDX_SERVER_PID (tests only: signal
# this pid instead of looking for the kvidx-server process).
set -u
cfg=${KVIDX_CONFIG:-/etc/kvidx/config.yaml}
poll=${RELOAD_POLL_SECONDS:-10}

checksum() { sha256sum "$cfg" 2>/dev/null | cut -d' ' -f1; }

server_pid() {
  if [ -n "${KVIDX_SERVER_PID:-}" ]; then  # tests: outside a pod's PID namespace
    echo "$KVIDX_SERVER_PID"
    return 0
  fi
  local d
  for d in /proc/[0-9]*; do
    if [ "$(cat "$d/comm" 2>/dev/null)" = "kvidx-server" ] &&
       ! tr '\0' ' ' < "$d/cmdline" 2>/dev/null | grep -q -- '--check-config'; then
      echo "${d#/proc/}"
      return 0
    fi
  done
  return 1
}

last=$(checksum)
echo "config-reloader: watching $cfg (sha256 ${last:-missing}), every ${poll}s"
while sleep "$poll"; do
  cur=$(checksum)
  if [ -z "$cur" ] || [ "$cur" = "$last" ]; then
    continue
  fi
  if ! out=$(kvidx-server --config "$cfg" --check-config 2>&1); then
    echo "config-reloader: $cfg changed (sha256 $cur) but is invalid, not reloading: $out"
    last=$cur
    continue
  fi
  if pid=$(server_pid) && kill -HUP "$pid"; then
    echo "config-reloader: $cfg changed (sha256 $cur, $out); sent SIGHUP to kvidx-server pid $pid"
    last=$cur
  else
    echo "config-reloader: $cfg changed but no kvidx-server process found; retrying"
  fi
done
