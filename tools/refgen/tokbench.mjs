// Helper of tokbench.sh.
//   node tokbench.mjs corpus DIR   writes DIR/chunks.json: a deterministic >= 5 MB mix of Go
//                                  source, English text and the multilingual corpus, cut into
//                                  16 KB line-aligned chunks
//   node tokbench.mjs rust DIR RE  encodes the chunks with @anush008/tokenizers (Rust), checks
//                                  the ids equal DIR/go-RE.ids, prints MB/s
import { createRequire } from "node:module";
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { corpus, rng, pieces } from "./tokenizer-corpus.mjs";

const [mode, dir, regex] = process.argv.slice(2);
const CHUNK = 16 * 1024;

function walk(d, out) {
  for (const name of readdirSync(d).sort()) {
    const p = join(d, name);
    if (statSync(p).isDirectory()) {
      if (name !== "testdata" && name !== "vendor") walk(p, out);
    } else out.push(p);
  }
  return out;
}

function take(files, limit) {
  let s = "";
  for (const f of files) {
    if (s.length >= limit) break;
    s += readFileSync(f, "utf8") + "\n";
  }
  return s;
}

function buildCorpus() {
  const goroot = execFileSync("go", ["env", "GOROOT"], { encoding: "utf8" }).trim();
  const src = walk(join(goroot, "src"), []);
  const code = take(src.filter((f) => f.endsWith(".go")), 2_200_000);
  const prose = [join(goroot, "src/testdata/Isaac.Newton-Opticks.txt"), join(goroot, "LICENSE"), join(goroot, "PATENTS")]
    .concat(walk(goroot, []).filter((f) => f.endsWith(".md") && !f.includes("/testdata/")))
    .concat(["go_spec.html", "go_mem.html", "asm.html"].map((f) => join(goroot, "doc", f)))
    .map((f) => readFileSync(f, "utf8").replace(/<[^>]*>/g, ""))
    .join("\n");
  const cases = corpus().map(([, t]) => t);
  const r = rng(5);
  const multi = [];
  for (let n = 0, i = 0; n < 2_000_000; i++) {
    let s = cases[Math.floor(r() * cases.length)];
    const v = r();
    if (v < 0.25) s = s.toUpperCase();
    else if (v < 0.5) s = `${i}. ${s} ${pieces[Math.floor(r() * pieces.length)]}`;
    else if (v < 0.6) s = s.split(" ").reverse().join(" ");
    multi.push(s);
    n += Buffer.byteLength(s) + 1;
  }
  const text = [code, prose, multi.join("\n")].join("\n");
  const chunks = [];
  let cur = "", curBytes = 0;
  for (const line of text.split(/(?<=\n)/)) {
    const b = Buffer.byteLength(line);
    if (curBytes + b > CHUNK && curBytes > 0) {
      chunks.push(cur);
      cur = "";
      curBytes = 0;
    }
    cur += line;
    curBytes += b;
  }
  if (cur) chunks.push(cur);
  writeFileSync(join(dir, "chunks.json"), JSON.stringify(chunks));
  const mb = (s) => (Buffer.byteLength(s) / 1e6).toFixed(2);
  console.log(`corpus: ${mb(text)} MB (Go source ${mb(code)}, English ${mb(prose)}, multilingual ${mb(multi.join("\n"))}), ${chunks.length} chunks`);
}

async function rust() {
  const require = createRequire(import.meta.url);
  const { Tokenizer } = require("@anush008/tokenizers");
  const json = JSON.parse(gunzipSync(readFileSync(new URL("../../resources/qwen3-tokenizer.json.gz", import.meta.url))).toString("utf8"));
  if (regex === "qwen35") {
    json.pre_tokenizer.pretokenizers[0].pattern.Regex = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
  }
  const chunks = JSON.parse(readFileSync(join(dir, "chunks.json"), "utf8"));
  const bytes = chunks.reduce((n, c) => n + Buffer.byteLength(c), 0);
  const rates = [];
  let ids;
  for (let pass = 0; pass < 3; pass++) {
    const tok = Tokenizer.fromString(JSON.stringify(json)); // a fresh word cache each pass
    const all = [];
    const t0 = process.hrtime.bigint();
    for (const c of chunks) all.push((await tok.encode(c, null, { addSpecialTokens: false })).getIds());
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    rates.push(bytes / 1e6 / s);
    ids = all;
  }
  const flat = new Uint32Array(ids.reduce((n, a) => n + a.length, 0));
  let k = 0;
  for (const a of ids) for (const id of a) flat[k++] = id;
  const goIds = new Uint32Array(readFileSync(join(dir, `go-${regex}.ids`)).buffer.slice(0));
  let same = goIds.length === flat.length;
  let first = -1;
  for (let i = 0; same && i < flat.length; i++) if (flat[i] !== goIds[i]) { same = false; first = i; }
  const goRate = Number(readFileSync(join(dir, `go-${regex}.rate`), "utf8"));
  const best = Math.max(...rates);
  console.log(`${regex}: Rust ${best.toFixed(2)} MB/s (passes ${rates.map((r) => r.toFixed(2)).join(", ")}), ${flat.length} ids, ${(bytes / flat.length).toFixed(2)} bytes/token`);
  console.log(`${regex}: Go ${goRate.toFixed(2)} MB/s; ratio Go/Rust ${(goRate / best).toFixed(1)}x; ids ${same ? "identical" : `DIFFER (first at ${first}, lengths ${goIds.length} vs ${flat.length})`}`);
  if (!same) process.exit(1);
}

if (mode === "corpus") buildCorpus();
else if (mode === "rust") await rust();
else throw new Error("usage: tokbench.mjs corpus|rust DIR [qwen3|qwen35]");
