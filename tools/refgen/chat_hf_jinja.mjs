// Second opinion on the chat-template references: renders every case of
// testdata/chat/cases_input.json with @huggingface/jinja (the JS Jinja of transformers.js) and
// records, per case, whether it reproduces testdata/chat/cases.json (the Python reference).
//
// Usage (from the repo root, after `npm install` in tools/refgen):
//   node tools/refgen/chat_hf_jinja.mjs testdata/chat/cases_input.json testdata/chat/cases.json testdata/chat/cases_hf_jinja.json
import { readFileSync, writeFileSync } from "node:fs";
import { Template } from "@huggingface/jinja";

const [inPath, refPath, outPath] = process.argv.slice(2);
const qwen = readFileSync(new URL("../../engine/chat/qwen3_6_chat_template.jinja", import.meta.url), "utf8");
const input = JSON.parse(readFileSync(inPath, "utf8")).cases;
const ref = new Map(JSON.parse(readFileSync(refPath, "utf8")).cases.map((c) => [c.name, c]));
const version = JSON.parse(readFileSync(new URL("./node_modules/@huggingface/jinja/package.json", import.meta.url), "utf8")).version;

// Same preprocessing as tools/refgen/chat_cases.py and engine/chat (what vLLM does).
function preprocess(messages) {
  for (const m of messages) {
    if (m?.role !== "assistant") continue;
    if ("reasoning" in m && !("reasoning_content" in m)) m.reasoning_content = m.reasoning;
    for (const c of Array.isArray(m.tool_calls) ? m.tool_calls : []) {
      const fn = c?.function;
      if (!fn || typeof fn !== "object") continue;
      if (fn.arguments == null || fn.arguments === "") fn.arguments = {};
      else if (typeof fn.arguments === "string") fn.arguments = JSON.parse(fn.arguments);
    }
  }
  return messages;
}

const results = [];
let matches = 0;
for (const c of input) {
  const want = ref.get(c.name);
  let got;
  try {
    const out = new Template(c.template ?? qwen).render({
      ...(c.chat_template_kwargs ?? {}),
      messages: preprocess(structuredClone(c.messages)),
      tools: c.tools ?? null,
      documents: null,
      add_generation_prompt: c.add_generation_prompt ?? true,
    });
    got = { output: out };
  } catch (e) {
    got = { error: String(e?.message ?? e) };
  }
  const match = want.error ? got.error === want.error.message : got.output === want.expected;
  if (match) matches++;
  results.push(match ? { name: c.name, match } : { name: c.name, match, ...got });
}
writeFileSync(outPath, JSON.stringify({ package: `@huggingface/jinja@${version}`, matches, total: input.length, cases: results }, null, 1) + "\n");
console.log(`@huggingface/jinja@${version}: ${matches}/${input.length} match the Python reference`);
