// Real-client tests: the official `@anthropic-ai/sdk` against `lily serve --demo` (Messages,
// streaming and not, count_tokens, tools). The demo model's text is noise: the tests judge the
// protocol, which the SDK checks as it parses.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";

import { pngBase64, startServer } from "./lib.mjs";

let srv, client;
before(async () => {
  srv = await startServer([], { LILY_API_KEY: "anthropic-test-key" });
  client = new Anthropic({ baseURL: srv.base, apiKey: "anthropic-test-key", maxRetries: 0 });
});
after(() => srv?.proc.kill());

const tools = [{
  name: "get_weather",
  description: "Weather for a city",
  input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
}];

test("messages.create answers a message with usage", async () => {
  const msg = await client.messages.create({
    model: "claude-sonnet-4-5",
    max_tokens: 16,
    system: [{ type: "text", text: "Be brief.", cache_control: { type: "ephemeral" } }],
    messages: [{ role: "user", content: "Say hello." }],
  });
  assert.equal(msg.type, "message");
  assert.equal(msg.role, "assistant");
  assert.ok(["end_turn", "max_tokens", "tool_use", "stop_sequence"].includes(msg.stop_reason));
  assert.ok(Array.isArray(msg.content));
  assert.ok(msg.usage.input_tokens > 0 && msg.usage.output_tokens > 0);
});

test("messages.stream delivers events the SDK assembles into the final message", async () => {
  const stream = client.messages.stream({
    model: "claude-sonnet-4-5",
    max_tokens: 24,
    thinking: { type: "enabled", budget_tokens: 1024 },
    messages: [{ role: "user", content: "Think, then say hello." }],
  });
  const kinds = new Set();
  stream.on("streamEvent", (e) => kinds.add(e.type));
  const msg = await stream.finalMessage();
  for (const k of ["message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"]) {
    assert.ok(kinds.has(k), `saw ${k}`);
  }
  assert.equal(msg.usage.output_tokens, 24);
  assert.equal(msg.stop_reason, "max_tokens");
  assert.ok(msg.content.length >= 1);
  assert.equal(msg.content[0].type, "thinking"); // thinking on: the prompt opens a reasoning block
});

test("tools with tool_choice any, then a tool_result turn", async () => {
  const first = await client.messages.create({
    model: "m", max_tokens: 160, tools, tool_choice: { type: "any" },
    messages: [{ role: "user", content: "Weather in Paris?" }],
  });
  // Forced: constrained decoding makes even the demo's noise a call valid for the schema.
  assert.equal(first.stop_reason, "tool_use");
  const call = first.content.find((b) => b.type === "tool_use");
  assert.equal(call.name, "get_weather");
  assert.equal(typeof call.input.city, "string");
  // A conversation that carries a tool call and its result, as an agent sends the next turn.
  const second = await client.messages.create({
    model: "m", max_tokens: 8, tools,
    messages: [
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "Sunny, 21°C" }] },
    ],
  });
  assert.equal(second.type, "message");
});

test("count_tokens counts the rendered prompt", async () => {
  const short = await client.messages.countTokens({ model: "m", messages: [{ role: "user", content: "Hi" }] });
  const long = await client.messages.countTokens({ model: "m", tools, system: "You are terse.", messages: [{ role: "user", content: "Hi" }] });
  assert.ok(short.input_tokens > 0);
  assert.ok(long.input_tokens > short.input_tokens);
});

test("errors come back in Anthropic's shape", async () => {
  const bad = new Anthropic({ baseURL: srv.base, apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(bad.messages.create({ model: "m", max_tokens: 4, messages: [{ role: "user", content: "x" }] }),
    (e) => e instanceof Anthropic.AuthenticationError && e.error?.error?.type === "authentication_error");
  await assert.rejects(client.messages.create({ model: "m", max_tokens: 4, messages: [{ role: "user", content: [{ type: "document", source: { type: "base64", media_type: "application/pdf", data: "AA==" } }] }] }),
    (e) => e instanceof Anthropic.BadRequestError && /reads text and images/.test(e.message));
});

test("an image, in a message or a tool result, is answered, and the next turn goes on", async () => {
  const image = { type: "image", source: { type: "base64", media_type: "image/png", data: pngBase64(96, 64, 3) } };
  const plain = await client.messages.create({ model: "m", max_tokens: 4, messages: [{ role: "user", content: "What is this?" }] });
  const first = await client.messages.create({ model: "m", max_tokens: 4, messages: [{ role: "user", content: [{ type: "text", text: "What is this?" }, image] }] });
  assert.equal(first.type, "message");
  // Anthropic's input_tokens leave out what the prefix cache served: the prompt is all three.
  const prompt = (u) => u.input_tokens + (u.cache_read_input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0);
  assert.equal(prompt(first.usage) - prompt(plain.usage), 8, "the image's 6 tokens and the vision start and end are in the prompt");
  const history = [
    { role: "user", content: "Look at the screenshot." },
    { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "Read", input: { file_path: "shot.png" } }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: [image] }] },
  ];
  const tools = [{ name: "Read", description: "Reads a file", input_schema: { type: "object", properties: { file_path: { type: "string" } } } }];
  const second = await client.messages.create({ model: "m", max_tokens: 4, tools, messages: history });
  const third = await client.messages.create({ model: "m", max_tokens: 4, tools,
    messages: [...history, { role: "assistant", content: second.content.length ? second.content.filter((b) => b.type === "text") : [{ type: "text", text: "ok" }] }, { role: "user", content: "And now?" }] });
  assert.equal(third.type, "message");
});

test("models.list reads the models in Anthropic's shape", async () => {
  const page = await client.models.list();
  assert.equal(page.data[0].type, "model");
  assert.ok(page.data[0].id);
});
