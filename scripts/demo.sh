#!/usr/bin/env bash
# README command 1: install, build, run the in-process demo (simulated vLLM
# fleet -> real ZMQ ingest -> index -> prefix-aware routing). Extra args go to
# kvidx-demo (e.g. --keep-running, --requests N).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD_DIR=build bash scripts/build.sh -DKVIDX_BUILD_TESTS=OFF
exec build/bin/kvidx-demo "$@"
