#!/usr/bin/env bash
# Configures and builds kvidx into build/ (Release). Extra args go to cmake.
# BUILD_TARGETS="a b" builds only those targets (default: everything).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} "$@"
if [ -n "${BUILD_TARGETS:-}" ]; then
  # shellcheck disable=SC2086
  cmake --build "$BUILD_DIR" -j "$JOBS" --target $BUILD_TARGETS
else
  cmake --build "$BUILD_DIR" -j "$JOBS"
fi
