// Real-client tests: the official `openai` npm SDK and curl against `lily serve --demo`, started
// here. The demo model has random weights, so tests check protocol behaviour, not answers.
// Run: LILY_BIN=/path/to/lily node --test tools/clienttest/   (tools/test.sh does this).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import OpenAI from "openai";

import { bin, pngBase64, startServer } from "./lib.mjs";

const run = promisify(execFile);

let srv, client;
before(async () => {
  srv = await startServer();
  client = new OpenAI({ baseURL: srv.base + "/v1", apiKey: "unused", maxRetries: 0 });
});
after(() => srv?.proc.kill());

const hello = [{ role: "user", content: "Say hello." }];
const weather = [{
  type: "function",
  function: {
    name: "get_weather",
    description: "Weather for a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
}];

test("models list reports the context length", async () => {
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].id, "lily-demo");
  assert.ok(models.data[0].context_length > 0);
});

test("non-streaming chat completion", async () => {
  const r = await client.chat.completions.create({ model: "whatever", messages: hello, max_tokens: 8, seed: 1 });
  assert.equal(r.object, "chat.completion");
  assert.equal(r.model, "lily-demo");
  assert.equal(r.choices[0].message.role, "assistant");
  assert.ok(["length", "stop"].includes(r.choices[0].finish_reason));
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 8);
});

test("same seed, same output", async () => {
  const req = { model: "m", messages: hello, max_tokens: 12, seed: 42, chat_template_kwargs: { enable_thinking: false } };
  const a = await client.chat.completions.create(req);
  const b = await client.chat.completions.create(req);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
});

test("streaming chat completion with usage", async () => {
  const stream = await client.chat.completions.create({
    model: "m", messages: hello, max_tokens: 10, stream: true, stream_options: { include_usage: true },
    chat_template_kwargs: { enable_thinking: false },
  });
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  assert.equal(chunks[0].choices[0].delta.role, "assistant");
  const usage = chunks.at(-1);
  assert.deepEqual(usage.choices, []);
  assert.ok(usage.usage.completion_tokens > 0);
  const final = chunks.at(-2);
  assert.ok(["length", "stop"].includes(final.choices[0].finish_reason));
  const text = chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("");
  assert.equal(typeof text, "string");
});

test("stream helper accumulates a forced tool call", async () => {
  const runner = client.chat.completions.stream({
    model: "m", messages: [{ role: "user", content: "Weather in Paris?" }], tools: weather,
    tool_choice: { type: "function", function: { name: "get_weather" } }, max_tokens: 160,
  });
  const done = await runner.finalChatCompletion();
  const calls = done.choices[0].message.tool_calls;
  assert.equal(calls.length, 1);
  assert.equal(calls[0].type, "function");
  assert.equal(calls[0].function.name, "get_weather");
  assert.match(calls[0].id, /^call_/);
  assert.equal(typeof JSON.parse(calls[0].function.arguments).city, "string"); // the schema's required string
});

test("responses.create, not streamed: items and usage", async () => {
  const r = await client.responses.create({ model: "m", input: "Say hello.", max_output_tokens: 12, reasoning: { effort: "low" } });
  assert.equal(r.object, "response");
  assert.ok(["completed", "incomplete"].includes(r.status));
  assert.ok(r.output.length >= 1);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  assert.ok(r.usage.output_tokens_details.reasoning_tokens <= r.usage.output_tokens);
  const got = await client.responses.retrieve(r.id);
  assert.equal(got.id, r.id);
  const next = await client.responses.create({ model: "m", input: "Again.", previous_response_id: r.id, max_output_tokens: 4 });
  assert.ok(next.usage.input_tokens > r.usage.input_tokens);
  await client.responses.delete(r.id);
  await assert.rejects(client.responses.retrieve(r.id), (e) => e instanceof OpenAI.NotFoundError);
});

test("responses.stream: the SDK's strict event checks and its final response", async () => {
  const stream = client.responses.stream({
    model: "m", max_output_tokens: 16, reasoning: { summary: "auto" }, store: false,
    input: [{ role: "developer", content: "Be brief." }, { role: "user", content: [{ type: "input_text", text: "Hi" }] }],
    tools: [{ type: "function", name: "get_weather", parameters: weather[0].function.parameters, strict: false }, { type: "web_search" }],
  });
  const kinds = new Set();
  let last;
  for await (const e of stream) {
    kinds.add(e.type);
    last = e;
  }
  const final = await stream.finalResponse(); // assembled by the SDK from the items' events
  for (const k of ["response.created", "response.in_progress", "response.output_item.added", "response.output_item.done"]) assert.ok(kinds.has(k), k);
  // 16 tokens cut the answer: response.incomplete (which this SDK does not fold into its snapshot).
  assert.ok(["response.completed", "response.incomplete"].includes(last.type));
  assert.equal(last.response.usage.output_tokens, 16);
  assert.ok(final.output.length >= 1 && final.output.every((item) => item.id));
});

test("errors are OpenAI errors", async () => {
  await assert.rejects(client.chat.completions.create({ model: "m", messages: hello, n: 2 }), (e) => e.status === 400 && /n must be 1/.test(e.message));
  await assert.rejects(
    client.chat.completions.create({ model: "m", messages: [{ role: "user", content: [{ type: "input_audio", input_audio: { data: "AA==", format: "wav" } }] }] }),
    (e) => e.status === 400 && e.type === "invalid_request_error",
  );
  // An image is seen: its 6 tokens and the vision start and end are in the prompt. A corrupt one
  // is not an error either: it is answered, with a placeholder in its place.
  const plain = await client.chat.completions.create({ model: "m", max_tokens: 2, messages: [{ role: "user", content: "What is this?" }] });
  const ask = (url) => client.chat.completions.create({ model: "m", max_tokens: 2,
    messages: [{ role: "user", content: [{ type: "text", text: "What is this?" }, { type: "image_url", image_url: { url } }] }] });
  const withImage = await ask("data:image/png;base64," + pngBase64(96, 64, 5));
  assert.equal(withImage.usage.prompt_tokens - plain.usage.prompt_tokens, 8);
  const corrupt = await ask("data:image/png;base64,iVBORw0KGgo=");
  assert.ok(corrupt.usage.prompt_tokens > plain.usage.prompt_tokens);
  await assert.rejects(
    client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "x ".repeat(40000) }] }),
    (e) => e.status === 400 && e.code === "context_length_exceeded",
  );
  await assert.rejects(client.chat.completions.create({ model: "m", messages: [{ role: "system", content: "only a system turn" }] }), (e) => e.status === 400);
});

test("abort mid-stream frees the server", async () => {
  const ac = new AbortController();
  const stream = await client.chat.completions.create(
    { model: "m", messages: hello, max_tokens: 4000, stream: true }, { signal: ac.signal });
  let n = 0;
  try {
    for await (const _ of stream) if (++n === 3) ac.abort();
  } catch (e) {
    assert.equal(e.name, "APIUserAbortError"); // the SDK may end the loop quietly or with this
  }
  assert.ok(n >= 3 && n < 50, `read ${n} chunks after aborting at 3`);
  // The next request is served at once (the aborted generation stopped and released the slot).
  const started = Date.now();
  const r = await client.chat.completions.create({ model: "m", messages: hello, max_tokens: 2 });
  assert.ok(r.choices.length === 1);
  assert.ok(Date.now() - started < 5000);
  let metrics = "";
  for (let i = 0; i < 50 && !/lily_queue_depth 0/.test(metrics); i++) {
    metrics = await (await fetch(srv.base + "/metrics")).text();
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.match(metrics, /lily_queue_depth 0/);
});

test("curl: plain and streaming requests", async () => {
  const body = JSON.stringify({ model: "m", messages: hello, max_tokens: 3 });
  const { stdout } = await run("curl", ["-sS", "-H", "Content-Type: application/json", "-d", body, srv.base + "/v1/chat/completions"]);
  assert.equal(JSON.parse(stdout).object, "chat.completion");
  const streamBody = JSON.stringify({ model: "m", messages: hello, max_tokens: 3, stream: true });
  const { stdout: sse } = await run("curl", ["-sSN", "-H", "Content-Type: application/json", "-d", streamBody, srv.base + "/v1/chat/completions"]);
  const events = sse.split("\n\n").filter((e) => e.startsWith("data: "));
  assert.equal(events.at(-1), "data: [DONE]");
  for (const e of events.slice(0, -1)) assert.equal(JSON.parse(e.slice(6)).object, "chat.completion.chunk");
});

test("API key is enforced", async () => {
  const keyed = await startServer([], { LILY_API_KEY: "s3cret" });
  try {
    const bad = new OpenAI({ baseURL: keyed.base + "/v1", apiKey: "wrong", maxRetries: 0 });
    await assert.rejects(bad.models.list(), (e) => e.status === 401);
    const good = new OpenAI({ baseURL: keyed.base + "/v1", apiKey: "s3cret", maxRetries: 0 });
    assert.equal((await good.models.list()).data.length, 1);
  } finally {
    keyed.proc.kill();
  }
});

test("a non-loopback bind without a key is refused", async () => {
  await assert.rejects(run(bin, ["serve", "--demo", "--host", "0.0.0.0", "--port", "0"]), (e) => /api-key/.test(e.stderr));
});

test("a foreign Host or browser origin is refused before anything runs", async () => {
  const port = new URL(srv.base).port;
  const body = JSON.stringify({ model: "m", messages: hello, max_tokens: 2 });
  const rebound = await run("curl", ["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-H", `Host: evil.example:${port}`, srv.base + "/v1/models"]);
  assert.equal(rebound.stdout, "421");
  // A cross-site page's "simple" POST (text/plain, no preflight).
  const { stdout } = await run("curl", ["-sS", "-w", "\n%{http_code}", "-H", "Origin: https://evil.example", "-H", "Content-Type: text/plain", "-d", body, srv.base + "/v1/chat/completions"]);
  const [json, code] = stdout.split("\n");
  assert.equal(code, "403");
  assert.equal(JSON.parse(json).error.code, "origin_not_allowed");
  // The same request from a page on this machine passes, with CORS headers.
  const ok = await fetch(srv.base + "/v1/chat/completions", { method: "POST", body, headers: { origin: "http://localhost:5173", "content-type": "application/json" } });
  assert.equal(ok.status, 200);
  assert.equal(ok.headers.get("access-control-allow-origin"), "http://localhost:5173");
});

test("serve --help does not print $LILY_API_KEY", async () => {
  const { stdout } = await run(bin, ["serve", "--help"], { env: { ...process.env, LILY_API_KEY: "topsecret-456" } });
  assert.ok(!stdout.includes("topsecret"));
  assert.match(stdout, /LILY_API_KEY/);
});

test("SIGTERM ends open streams with an error event and [DONE], then exits 0", async () => {
  const s = await startServer();
  const exited = new Promise((resolve) => s.proc.on("exit", (code, signal) => resolve({ code, signal })));
  try {
    // No end-of-turn token can be chosen, so each stream runs until it is stopped.
    const body = JSON.stringify({ model: "m", messages: hello, stream: true, max_tokens: 20000, logit_bias: { 151643: -100, 151645: -100 } });
    const streams = await Promise.all([0, 1].map(async () => {
      const r = await fetch(s.base + "/v1/chat/completions", { method: "POST", body, headers: { "content-type": "application/json" } });
      const reader = r.body.getReader();
      const first = await reader.read();
      return { reader, text: new TextDecoder().decode(first.value) };
    }));
    const t0 = Date.now();
    s.proc.kill("SIGTERM");
    for (const st of streams) {
      for (;;) {
        const { value, done } = await st.reader.read();
        if (done) break;
        st.text += new TextDecoder().decode(value);
      }
      const events = st.text.split("\n\n").filter((e) => e.startsWith("data: "));
      assert.equal(events.at(-1), "data: [DONE]", `stream ended with ${events.at(-1)}; server log:\n${s.log()}`);
      assert.equal(JSON.parse(events.at(-2).slice(6)).error.code, "shutting_down");
    }
    const { code, signal } = await exited;
    assert.equal(signal, null);
    assert.equal(code, 0);
    assert.ok(Date.now() - t0 < 5000, `exit took ${Date.now() - t0} ms`);
  } finally {
    s.proc.kill("SIGKILL");
  }
});
