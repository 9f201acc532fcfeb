#!/usr/bin/env bash
# README command 2 and what CI runs: install, build, run every test.
#   0. the include rules of docs/ARCHITECTURE.md (scripts/check-layers.sh)
#   1. Release build, all tests (ctest, including the reliability suite's
#      attacks on a server process); deploy lint (promtool, YAML,
#      dashboard, metric names), a real Prometheus scraping kvidx, and
#      restarted vs never-restarted servers compared on real processes
#   2. ASan+UBSan build, all tests
#   3. TSan build, the threaded tests (labels ingest, index; the gRPC-based
#      areas cannot run under TSan with Debian's uninstrumented gRPC, see
#      tests/common/tsan_suppressions.cc)
#   4. clang -Wthread-safety build of the index library and its tests
#      (scripts/thread_safety.sh: lock annotations checked, as errors)
#   5. clang libFuzzer build; replay the seed corpus and fuzz briefly
# Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
JOBS=${JOBS:-$(nproc)}
start=$(date +%s)
stage() { echo; echo "=== [$(( $(date +%s) - start ))s] $*"; }

stage "setup + include rules"
bash scripts/setup.sh
bash scripts/setup-npm-references.sh
bash scripts/check-layers.sh

stage "release build + tests"
BUILD_DIR=build bash scripts/build.sh
ctest --test-dir build --output-on-failure -j "$JOBS" --timeout 300

stage "deploy: lint + Prometheus end to end + restart parity"
BUILD_DIR=build bash scripts/check-deploy.sh
BUILD_DIR=build bash tests/deploy/prometheus_e2e.sh
BUILD_DIR=build bash tests/deploy/restart_parity_e2e.sh

stage "ASan+UBSan build + tests"
BUILD_DIR=build-asan BUILD_TYPE=RelWithDebInfo bash scripts/build.sh \
  -DKVIDX_SANITIZE=address -DKVIDX_BUILD_BENCH=OFF
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$JOBS" --timeout 600

stage "TSan build + threaded tests"
BUILD_DIR=build-tsan BUILD_TYPE=RelWithDebInfo BUILD_TARGETS="kvidx_ingest_test kvidx_index_test" \
  bash scripts/build.sh -DKVIDX_SANITIZE=thread -DKVIDX_BUILD_BENCH=OFF
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  ctest --test-dir build-tsan --output-on-failure -j "$JOBS" --timeout 600 -L 'ingest|index'

stage "clang thread-safety analysis (index)"
bash scripts/thread_safety.sh

stage "fuzz: corpus replay + short run"
bash scripts/fuzz.sh --ci

stage "done in $(( $(date +%s) - start ))s"
