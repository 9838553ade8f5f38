// Real-client tests: the official `ollama` npm package against `lily serve --demo` (the Ollama
// API: model listings, chat and generate streaming and not, tools, refusals, --ollama-port). The
// demo model's text is noise: the tests judge the protocol, never the content.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { Ollama } from "ollama";

import { pngBase64, startServer } from "./lib.mjs";

// freePort finds a loopback port nothing listens on (for --ollama-port).
function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

let srv, client, ollamaPort;
before(async () => {
  ollamaPort = await freePort();
  srv = await startServer(["--ollama-port", String(ollamaPort)]);
  client = new Ollama({ host: srv.base });
});
after(() => srv?.proc.kill());

const model = "qwen3:latest"; // any name: Lily serves its one model under it

const tools = [{
  type: "function",
  function: {
    name: "get_weather",
    description: "Weather for a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
}];

// collect reads a stream to its end: every part but the last is not done.
async function collect(stream) {
  const parts = [];
  for await (const part of stream) parts.push(part);
  assert.ok(parts.length >= 2, "a streamed answer has parts and a last one");
  assert.ok(parts.slice(0, -1).every((p) => p.done === false));
  const last = parts.at(-1);
  assert.equal(last.done, true);
  assert.ok(["stop", "length"].includes(last.done_reason));
  assert.ok(last.prompt_eval_count > 0 && last.eval_count > 0 && last.total_duration > 0);
  return parts;
}

test("list, show, ps and version describe the served model", async () => {
  const { models } = await client.list();
  assert.equal(models.length, 1);
  const m = models[0];
  assert.equal(m.name, "lily-demo");
  assert.equal(m.model, m.name);
  assert.match(m.digest, /^[0-9a-f]{64}$/);
  assert.ok(m.size > 0, "the demo checkpoint's weights have a size");
  assert.equal(m.details.family, "qwen3moe");
  assert.ok(!Number.isNaN(Date.parse(m.modified_at)));

  const info = await client.show({ model: m.name + ":latest" });
  assert.deepEqual(info.capabilities, ["completion", "tools", "thinking", "vision"]);
  assert.equal(info.model_info["general.architecture"], "qwen3moe");
  assert.ok(info.model_info["qwen3moe.context_length"] > 0);

  const ps = await client.ps();
  assert.equal(ps.models.length, 1);
  assert.equal(ps.models[0].digest, m.digest);
  assert.ok(Date.parse(ps.models[0].expires_at) > Date.now());

  const { version } = await client.version();
  const [major, minor, patch] = version.split(".").map(Number);
  assert.ok(major > 0 || minor > 6 || (minor === 6 && patch >= 4), `version ${version} is at least 0.6.4`);
});

test("chat, not streamed", async () => {
  const r = await client.chat({ model, messages: [{ role: "user", content: "Say hello." }], think: false, options: { num_predict: 8, temperature: 0.5, seed: 3 } });
  assert.equal(r.model, model);
  assert.equal(r.done, true);
  assert.equal(r.message.role, "assistant");
  assert.equal(typeof r.message.content, "string");
  assert.ok(r.eval_count > 0 && r.eval_count <= 8);
  assert.ok(r.prompt_eval_count > 0);
});

test("chat, streamed, with thinking", async () => {
  const stream = await client.chat({ model, messages: [{ role: "user", content: "Think, then say hello." }], stream: true, think: true, options: { num_predict: 12 } });
  const parts = await collect(stream);
  // Thinking on: the prompt opens a reasoning block, so the first output is thinking.
  assert.equal(typeof parts[0].message.thinking, "string");
  assert.ok(parts[0].message.thinking.length > 0);
  assert.ok(parts.every((p) => p.message.role === "assistant"));
});

test("generate, streamed and not; an empty prompt loads", async () => {
  const one = await client.generate({ model, prompt: "Hi", system: "Be brief.", think: false, options: { num_predict: 6 } });
  assert.equal(one.done, true);
  assert.equal(typeof one.response, "string");
  assert.ok(one.eval_count > 0 && one.eval_count <= 6);

  const parts = await collect(await client.generate({ model, prompt: "Hi", stream: true, think: false, options: { num_predict: 6 } }));
  assert.ok(parts.every((p) => typeof p.response === "string"));

  const raw = await client.generate({ model, prompt: "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", raw: true, options: { num_predict: 4 } });
  assert.equal(raw.done, true);

  const load = await client.generate({ model, prompt: "" });
  assert.equal(load.done_reason, "load");
});

test("chat with tools, then a tool result turn", async () => {
  const first = await client.chat({ model, tools, messages: [{ role: "user", content: "Weather in Paris?" }], options: { num_predict: 16 } });
  assert.equal(first.done, true);
  for (const call of first.message.tool_calls ?? []) {
    assert.equal(typeof call.function.name, "string");
    assert.equal(typeof call.function.arguments, "object");
  }
  // A conversation that carries a call and its result, as an agent sends the next turn.
  const second = await client.chat({
    model, tools, options: { num_predict: 4 },
    messages: [
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: "", tool_calls: [{ function: { name: "get_weather", arguments: { city: "Paris" } } }] },
      { role: "tool", content: "Sunny, 21°C", tool_name: "get_weather" },
    ],
  });
  assert.equal(second.done, true);
  assert.ok(second.prompt_eval_count > first.prompt_eval_count, "the call and its result are in the prompt");
});

test("embeddings and model management are refused with a clear error", async () => {
  await assert.rejects(client.embed({ model: "nomic-embed-text", input: "hello" }), (e) => {
    assert.equal(e.status_code, 400);
    assert.match(e.message, /"nomic-embed-text" does not support embeddings/);
    return true;
  });
  await assert.rejects(client.pull({ model: "llama3" }), (e) => e.status_code === 400 && /lily pull/.test(e.message));
});

test("a message with images is answered, the image seen", async () => {
  const plain = await client.chat({ model, messages: [{ role: "user", content: "What is this?" }], options: { num_predict: 4 } });
  const res = await client.chat({ model, messages: [{ role: "user", content: "What is this?", images: [pngBase64(96, 64, 9)] }], options: { num_predict: 4 } });
  assert.equal(res.message.role, "assistant");
  assert.ok(res.done);
  assert.equal(res.prompt_eval_count - plain.prompt_eval_count, 8, "the image's 6 tokens and the vision start and end");
});

test("--ollama-port serves the same API at the address Ollama's clients assume", async () => {
  const local = new Ollama({ host: `127.0.0.1:${ollamaPort}` });
  const { models } = await local.list();
  assert.equal(models[0].name, "lily-demo");
  const parts = await collect(await local.chat({ model, messages: [{ role: "user", content: "Hi" }], stream: true, think: false, options: { num_predict: 3 } }));
  assert.ok(parts.at(-1).eval_count <= 3, "num_predict bounds the answer");
});
