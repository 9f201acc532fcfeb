#!/usr/bin/env bash
# Generates the Python client's protobuf and gRPC stubs (client/python/
# kvidx_client/_pb) from proto/ with Debian's protoc and grpc_python_plugin,
# the same compilers the C++ build uses. Run before using or packaging the
# client; the test command runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=client/python/kvidx_client/_pb
rm -rf "$OUT"
mkdir -p "$OUT"
PLUGIN=$(command -v grpc_python_plugin)
protoc -I proto --python_out="$OUT" --grpc_out="$OUT" --plugin=protoc-gen-grpc="$PLUGIN" kvidx/v1/kvidx.proto
protoc -I proto/grpc/health/v1 --python_out="$OUT" --grpc_out="$OUT" --plugin=protoc-gen-grpc="$PLUGIN" health.proto
echo "gen-python-client: stubs in $OUT"
