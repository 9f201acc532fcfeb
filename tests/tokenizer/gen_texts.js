// Deterministic test texts for the tokenizer tests (no dependencies).
// makeTexts(seed, count, specialTokens) -> array of strings (valid UTF-16,
// no lone surrogates, so they encode to valid UTF-8).
'use strict';

function mulberry32(seed) {
  let a = seed >>> 0;
  return function () {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = ['the', 'The', 'THE', 'hello', 'Hello', 'world', 'tokenizer', "don't", "I'M", "we've", "they'll",
  "it's", "'s", "'T", 'naïve', 'café', 'résumé', 'Zürich', 'straße', 'Ελληνικά', 'Привет', 'мир', 'İstanbul',
  'ǅemal', 'ﬁne', 'ｆｕｌｌｗｉｄｔｈ', '①②', 'x²', '½', 'Ⅻ', 'ß', 'ΣΑΣ', 'ŉ', 'ﬀ', 'a', 'I', 'GPU', 'KV-cache',
  'vLLM', 'https://example.com/a?b=1&c=2', 'user@example.org', 'C++20', 'e.g.', 'U.S.A.', '--flag', '...', '?!',
  '“quoted”', '‘single’', '—', '–', '…', '«guillemets»', '¿Qué?', '¡Hola!', '§3.1', '#hashtag', '@mention',
  '$100', '€5,00', '¥', '100%', '3.14159', '1,000,000', '0x1F', '1e-9', '▁', '▁▁x', '<', '>', '<>', '</', '|'];
const CODE = ['def f(x):\n    return x * 2\n', 'for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}',
  'if (a && b || !c) { return; }', '#include <vector>\n', 'const x = {a: 1, "b": [2, 3]};',
  'SELECT * FROM t WHERE id = 42;', '  // comment\n', '/* block */', 'fn main() -> Result<(), E> {}',
  '<div class="x">text</div>', 'x=1;y=2', '$ ls -la | grep foo', 'lambda: None', '```python\nprint(1)\n```',
  '\\n\\t', 'a_b_c = d__e', '    ', '\t\t', 'std::string_view', '{{ var }}', '{% if x %}', '[[1,2],[3,4]]'];
const EMOJI = ['😀', '👍', '👍🏽', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🇺🇸', '🇯🇵', '❤️', '✨', '🧑🏿‍💻', '👩‍❤️‍💋‍👨', '🤖', '🔥',
  '☕', '⚡', '🫠', '🦀', '#️⃣', '1️⃣', '©', '™', '🀄', '𝕏', '𝓐', '𐍈', '𠀋', '🏴󠁧󠁢󠁳󠁣󠁴󠁿'];
const SPACES = [' ', '  ', '   ', '\t', '\n', '\r\n', '\n\n', ' \n', '\n ', '\t\n', '\r', '\u00a0', '\u3000',
  '\u2028', '\u0085', '\u200b', '\u2003', ' \t ', '\n\n\n', '        ', '\u000b', '\u000c'];
const NORM = ['e\u0301', '\u00e9', 'A\u030a', '\u00c5', '\u1100\u1161\u11a8', '\uac01', 'o\u0308\u0304',
  '\u1e9b\u0323', 'n\u0303', '\u212b', '\u2126', 'ｶﾞ', '\u0958', '\u0915\u093c', 'ä\u0323', 'q\u0307\u0323'];

function range(rand, lo, hi) { return lo + Math.floor(rand() * (hi - lo + 1)); }
function pick(rand, arr) { return arr[Math.floor(rand() * arr.length)]; }
function fromRanges(rand, ranges, n) {
  let s = '';
  for (let i = 0; i < n; i++) {
    const [lo, hi] = pick(rand, ranges);
    s += String.fromCodePoint(range(rand, lo, hi));
  }
  return s;
}

const SCRIPTS = {
  cjk: [[0x4e00, 0x9fa5], [0x3041, 0x3096], [0x30a1, 0x30fa], [0xac00, 0xd7a3], [0x3001, 0x3002], [0xff01, 0xff0f]],
  arabic: [[0x0621, 0x064a], [0x064b, 0x0652], [0x0660, 0x0669], [0x060c, 0x060c]],
  devanagari: [[0x0905, 0x0939], [0x093e, 0x094d], [0x0966, 0x096f], [0x0964, 0x0965]],
  thai: [[0x0e01, 0x0e30], [0x0e31, 0x0e3a], [0x0e40, 0x0e4e], [0x0e50, 0x0e59]],
  latin: [[0x61, 0x7a], [0x41, 0x5a], [0xe0, 0xff], [0x100, 0x17f]],
  cyrillic: [[0x410, 0x44f]],
  symbols: [[0x21, 0x2f], [0x3a, 0x40], [0x5b, 0x60], [0x7b, 0x7e], [0x2190, 0x21ff], [0x2200, 0x22ff]],
  control: [[0x1, 0x8], [0xe, 0x1f], [0x7f, 0x9f]],
};

function fragment(rand, specials) {
  const r = rand();
  if (r < 0.22) return pick(rand, WORDS);
  if (r < 0.32) return pick(rand, CODE);
  if (r < 0.40) return pick(rand, EMOJI) + (rand() < 0.3 ? pick(rand, EMOJI) : '');
  if (r < 0.52) return pick(rand, SPACES);
  if (r < 0.58) return String(Math.floor(rand() * Math.pow(10, range(rand, 1, 14))));
  if (r < 0.64 && specials.length) {
    const s = pick(rand, specials);
    const v = rand();
    if (v < 0.6) return s;
    if (v < 0.8) return s.slice(0, Math.max(1, s.length - 2));   // a truncated special token
    return ' ' + s + ' ';
  }
  if (r < 0.69) return pick(rand, NORM);
  if (r < 0.705) {  // a very long word
    const n = range(rand, 100, 1200);
    const v = rand();
    if (v < 0.3) return 'a'.repeat(n);
    if (v < 0.5) return ' '.repeat(Math.floor(n / 4)) + 'x';
    return fromRanges(rand, pick(rand, [SCRIPTS.latin, SCRIPTS.cjk, SCRIPTS.thai, SCRIPTS.symbols]), Math.floor(n / 3));
  }
  const names = Object.keys(SCRIPTS);
  return fromRanges(rand, SCRIPTS[pick(rand, names)], range(rand, 1, 12));
}

function makeTexts(seed, count, specials) {
  const rand = mulberry32(seed);
  const texts = ['', ' ', '  ', '\n', 'a', ' a', 'Hello world', '\r\n\t  x', '   leading spaces'];
  while (texts.length < count) {
    const n = range(rand, 1, 14);
    let s = rand() < 0.2 ? pick(rand, SPACES) : '';
    for (let i = 0; i < n; i++) {
      s += fragment(rand, specials);
      const sep = rand();
      if (sep < 0.55) s += ' ';
      else if (sep < 0.65) s += pick(rand, SPACES);
    }
    if (rand() < 0.1) s = s.normalize(rand() < 0.5 ? 'NFD' : 'NFKC');
    texts.push(s);
  }
  return texts;
}

module.exports = { makeTexts };
