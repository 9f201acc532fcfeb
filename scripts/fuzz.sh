#!/usr/bin/env bash
# Builds the libFuzzer targets with clang into build-fuzz/, writes their seed
# corpora, and fuzzes each in turn: decoder_fuzz (the spec's payload vectors
# as seeds) and tokenizer_fuzz (texts and a tokenizer.json as seeds; needs
# the npm references of scripts/setup-npm-references.sh).
#
#   scripts/fuzz.sh --ci         replay every seed, then fuzz for 60 s
#   scripts/fuzz.sh --runs N     replay, then exactly N fuzzing executions
#   scripts/fuzz.sh --time S     replay, then fuzz for S seconds
#   scripts/fuzz.sh ... -- ARGS  extra libFuzzer flags (e.g. -- -jobs=2)
#
# Exits non-zero on a finding; the reproducer lands in build-fuzz/fuzz/artifacts/.
# The grown corpus is kept in build-fuzz/fuzz/corpus/ across runs.
# Env: BUILD_DIR (default build-fuzz), JOBS.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD_DIR=${BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-$(nproc)}

runs=""
max_time=60
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --ci) max_time=60; runs=""; shift ;;
    --runs) runs="$2"; max_time=""; shift 2 ;;
    --time) max_time="$2"; runs=""; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "usage: $0 [--ci | --runs N | --time S] [-- libfuzzer-args]" >&2; exit 2 ;;
  esac
done

# Only the fuzz target is built; the rest of the tree is configured, not compiled.
CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKVIDX_FUZZ=ON -DKVIDX_BUILD_TESTS=OFF -DKVIDX_BUILD_BENCH=OFF -DKVIDX_WERROR=OFF -DKVIDX_SANITIZE= >/dev/null
cmake --build "$BUILD_DIR" --target decoder_fuzz tokenizer_fuzz -j "$JOBS"
FUZZER="$BUILD_DIR/bin/decoder_fuzz"

# Seed corpus: every payload in tests/vectors/event_payloads.json, the map16
# quirk both bare and wrapped in a batch, and the extra_keys value alone.
FUZZ_DIR="$BUILD_DIR/fuzz"
SEEDS="$FUZZ_DIR/seeds"
mkdir -p "$SEEDS" "$FUZZ_DIR/corpus" "$FUZZ_DIR/artifacts"
python3 - "$ROOT/tests/vectors/event_payloads.json" "$SEEDS" <<'PY'
import json, os, sys
vectors, out = sys.argv[1], sys.argv[2]
payloads = json.load(open(vectors))["payloads"]
def write(name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
for name, p in payloads.items():
    write(name, bytes.fromhex(p["payload_hex"]))
quirk = bytes.fromhex(payloads["quirk_map16_header_hypothetical"]["payload_hex"])
write("quirk_map16_wrapped", bytes.fromhex("93cb41d954fc4010000091") + quirk + b"\x00")
write("extra_keys", bytes.fromhex("9392a46c6f726192a26d6dff91c420" + "ab" * 32 + "c0"))
print(f"fuzz: {len(os.listdir(out))} seeds in {out}")
PY

echo "fuzz: replaying seeds"
"$FUZZER" "$SEEDS"/* >"$FUZZ_DIR/replay.log" 2>&1 || { cat "$FUZZ_DIR/replay.log"; exit 1; }

limit=()
if [ -n "$runs" ]; then limit=(-runs="$runs"); else limit=(-max_total_time="$max_time"); fi
echo "fuzz: fuzzing (${limit[*]})"
"$FUZZER" "${limit[@]}" -max_len=4096 -print_final_stats=1 \
  -dict="$ROOT/tests/fuzz/decoder_fuzz.dict" -artifact_prefix="$FUZZ_DIR/artifacts/" \
  "${extra[@]}" "$FUZZ_DIR/corpus" "$SEEDS"

# The tokenizer: seeds are texts for Qwen3 (byte 0/1) and Llama 2 (2/3), and
# a small tokenizer.json to load (4).
TOK_FUZZER="$BUILD_DIR/bin/tokenizer_fuzz"
TOK_DIR="$FUZZ_DIR/tokenizer"
mkdir -p "$TOK_DIR/seeds" "$TOK_DIR/corpus" "$TOK_DIR/artifacts"
python3 - "$TOK_DIR/seeds" <<'PY'
import os, sys
out = sys.argv[1]
texts = ["Hello world", "  leading spaces\r\n\tand tabs", "\u4f60\u597d\uff0c\u4e16\u754c 123456",
         "<|im_start|>user\nhi<|im_end|>", "e\u0301 \u00e9 \ufb01", "\U0001F468\u200d\U0001F469\u200d\U0001F467",
         "def f(x):\n    return x ** 2\n", "\u0645\u0631\u062d\u0628\u0627 \u0928\u092e\u0938\u094d\u0924\u0947 \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
         "a" * 300, "<s> </s> <unk>"]
for i, t in enumerate(texts):
    for mode in (0, 3):
        with open(os.path.join(out, f"text{i}_{mode}"), "wb") as f:
            f.write(bytes([mode]) + t.encode("utf-8"))
with open(os.path.join(out, "invalid_utf8"), "wb") as f:
    f.write(b"\x01ab\xc3(\xff")
tiny = ('{"added_tokens":[{"id":3,"content":"<s>","special":true,"normalized":false}],'
        '"normalizer":{"type":"Sequence","normalizers":[{"type":"NFKC"},{"type":"Lowercase"}]},'
        '"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":true},'
        '{"type":"Split","pattern":{"Regex":"\\\\s+"},"behavior":"MergedWithNext","invert":false}]},'
        '"post_processor":null,"model":{"type":"BPE","unk_token":"<unk>","byte_fallback":true,'
        '"vocab":{"<unk>":0,"a":1,"b":2,"<s>":3,"ab":4},"merges":["a b"]}}')
with open(os.path.join(out, "tokenizer_json"), "wb") as f:
    f.write(b"\x04" + tiny.encode())
print(f"fuzz: {len(os.listdir(out))} tokenizer seeds in {out}")
PY
echo "fuzz: replaying tokenizer seeds"
"$TOK_FUZZER" "$TOK_DIR/seeds"/* >"$TOK_DIR/replay.log" 2>&1 || { cat "$TOK_DIR/replay.log"; exit 1; }
echo "fuzz: fuzzing the tokenizer (${limit[*]})"
"$TOK_FUZZER" "${limit[@]}" -max_len=8192 -print_final_stats=1 -artifact_prefix="$TOK_DIR/artifacts/" \
  "${extra[@]}" "$TOK_DIR/corpus" "$TOK_DIR/seeds"
