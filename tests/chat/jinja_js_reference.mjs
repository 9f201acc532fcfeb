// The second chat-template reference: @huggingface/jinja (transformers.js's
// Jinja port) renders the variables chat_reference.py gave Python jinja2,
// for every generated conversation of every template, and the differences
// from Python jinja2 are counted.
//
// Python jinja2 is the authority (transformers, hence vLLM, renders with
// it); @huggingface/jinja is a partial port, so a difference is reported,
// not a failure: kvidx is held to Python jinja2 exactly elsewhere.
//
// Usage: node jinja_js_reference.mjs NPM_DIR REFERENCE_JSON OUT_JSON
// Writes {model: {"cases", "identical", "different", "js_errors",
// "js_rendered_python_errors", "both_errors", "examples": [...]}} ("cases":
// those that reached the template; "js_errors": Python rendered, the JS port
// threw; "js_rendered_python_errors": Python's template raised, the JS port
// did not; "both_errors": both raised).
import { readFileSync, writeFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const [npmDir, refPath, outPath] = process.argv.slice(2);
const jinjaEntry = `${npmDir}/node_modules/@huggingface/jinja/dist/index.js`;
let Template;
try {
  ({ Template } = await import(pathToFileURL(jinjaEntry).href));
} catch (e) {
  console.error(`jinja_js_reference: cannot load ${jinjaEntry} (run scripts/setup-npm-references.sh): ${e.message}`);
  process.exit(1);
}

function firstDifference(a, b) {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) ++i;
  return i;
}

const reference = JSON.parse(readFileSync(refPath, "utf8"));
const out = {};
for (const [model, entry] of Object.entries(reference)) {
  if (!entry || typeof entry.source !== "string") continue;
  const summary = { cases: 0, identical: 0, different: 0, js_errors: 0, js_rendered_python_errors: 0, both_errors: 0,
                    examples: [] };
  out[model] = summary;
  let template;
  try {
    template = new Template(entry.source);
  } catch (e) {
    summary.parse_error = String(e.message ?? e);
    continue;
  }
  entry.cases.forEach((c, index) => {
    if (!c.context) return;
    summary.cases += 1;
    let js;
    try {
      js = template.render(c.context);  // the port brings raise_exception and strftime_now
    } catch (e) {
      if (c.ok) {
        summary.js_errors += 1;
        if (summary.examples.length < 3) summary.examples.push({ index, js_error: String(e.message ?? e) });
      } else {
        summary.both_errors += 1;
      }
      return;
    }
    if (!c.ok) {
      summary.js_rendered_python_errors += 1;
      if (summary.examples.length < 3) summary.examples.push({ index, python_error: c.error });
      return;
    }
    if (js === c.uncut_text) {
      summary.identical += 1;
      return;
    }
    summary.different += 1;
    if (summary.examples.length < 3) {
      const at = firstDifference(c.uncut_text, js);
      summary.examples.push({ index, at, python: c.uncut_text.slice(Math.max(0, at - 30), at + 50),
                              js: js.slice(Math.max(0, at - 30), at + 50) });
    }
  });
}
writeFileSync(outPath, JSON.stringify(out, null, 1));
