#!/usr/bin/env bash
# clang's -Wthread-safety over the index library and its tests, into
# build-tsa/: a lock taken or missing where the annotations (KVIDX_GUARDED_BY,
# KVIDX_REQUIRES, ... from base/thread_annotations.h) say otherwise fails the
# build. Only clang checks them; GCC builds see empty macros.
# Env: BUILD_DIR (default build-tsa), JOBS.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-tsa} BUILD_TYPE=Debug BUILD_TARGETS="kvidx_index kvidx_index_test" \
  bash scripts/build.sh -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS="-Wthread-safety -Werror=thread-safety" -DKVIDX_BUILD_BENCH=OFF -DKVIDX_SANITIZE=
