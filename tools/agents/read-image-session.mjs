// Writes a Claude Code session in which the model called its Read tool on a PNG and the tool
// result holds the image, so that `claude --resume` sends that history to the server: the demo
// model's random weights never call a tool, so the CLI could not reach such a turn by itself.
//
// The rows follow what Claude Code records in ~/.claude/projects/<dir>/<session id>.jsonl, each
// linked to the one before by parentUuid: the user's prompt, the assistant's tool_use, and the
// user row with the tool_result, whose content is the image block Read puts there for an image
// file and whose toolUseResult is Read's output for one (FileReadOutput in the package's
// sdk-tools.d.ts).
//
// Usage: node read-image-session.mjs <clienttest lib.mjs> <work dir> <transcript dir>
// Writes <work dir>/picture.png and the transcript; prints the new session's id.
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";

const [lib, work, dir] = process.argv.slice(2);
const { pngBase64 } = await import(lib);
// Not the picture of the first run's prompt (seed 11): the tower must encode this one afresh,
// which shows that the server took it out of the tool result.
const png = pngBase64(96, 64, 53);
const file = path.join(work, "picture.png");
fs.writeFileSync(file, Buffer.from(png, "base64"));

const sessionId = crypto.randomUUID();
const ids = [crypto.randomUUID(), crypto.randomUUID(), crypto.randomUUID()];
const toolUseId = "toolu_" + crypto.randomBytes(12).toString("hex");
const start = Date.now() - 60000;
const row = (i, fields) => ({
  parentUuid: i === 0 ? null : ids[i - 1],
  isSidechain: false,
  uuid: ids[i],
  timestamp: new Date(start + i * 1000).toISOString(),
  sessionId,
  cwd: work,
  ...fields,
});
const image = { type: "image", source: { type: "base64", data: png, media_type: "image/png" } };
const rows = [
  row(0, { type: "user", message: { role: "user", content: "Look at picture.png." } }),
  row(1, {
    type: "assistant",
    message: {
      id: "msg_" + crypto.randomBytes(12).toString("hex"),
      type: "message",
      role: "assistant",
      model: "lily-demo",
      content: [{ type: "tool_use", id: toolUseId, name: "Read", input: { file_path: file } }],
      stop_reason: "tool_use",
      stop_sequence: null,
      usage: { input_tokens: 0, output_tokens: 0 },
    },
  }),
  row(2, {
    type: "user",
    sourceToolAssistantUUID: ids[1],
    message: { role: "user", content: [{ type: "tool_result", tool_use_id: toolUseId, content: [image] }] },
    toolUseResult: {
      type: "image",
      file: {
        base64: png,
        type: "image/png",
        originalSize: fs.statSync(file).size,
        dimensions: { originalWidth: 96, originalHeight: 64, displayWidth: 96, displayHeight: 64 },
      },
    },
  }),
];
fs.writeFileSync(path.join(dir, sessionId + ".jsonl"), rows.map((r) => JSON.stringify(r)).join("\n") + "\n");
console.log(sessionId);
