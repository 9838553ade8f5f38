// Shared by the real-client tests: start `lily serve --demo` on a free port.
import { spawn } from "node:child_process";
import zlib from "node:zlib";

export const bin = process.env.LILY_BIN;
if (!bin) throw new Error("set LILY_BIN to a built lily binary");

// startServer launches `lily serve --demo` on a free port and waits until /status says ready.
export async function startServer(extraArgs = [], env = {}) {
  const proc = spawn(bin, ["serve", "--demo", "--port", "0", ...extraArgs], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let log = "";
  const base = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("server did not start:\n" + log)), 60000);
    proc.stderr.on("data", (d) => {
      log += d;
      const m = log.match(/listening at (http:\/\/[^\s]+)\/v1/);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    proc.on("exit", (code) => reject(new Error(`server exited ${code}:\n${log}`)));
  });
  for (let i = 0; i < 600; i++) {
    const st = await (await fetch(base + "/status", { headers: env.LILY_API_KEY ? { authorization: "Bearer " + env.LILY_API_KEY } : {} })).json();
    if (st.phase === "ready") return { proc, base, log: () => log };
    if (st.phase === "error") throw new Error("startup failed: " + st.error);
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("server never became ready");
}


// pngBase64 is a w×h RGB PNG (a colour gradient shifted by seed), base64-encoded: a real image
// for the vision tower of the demo model (its processor keeps a 96×64 image as it is: 6 tokens).
export function pngBase64(w, h, seed = 0) {
  const raw = Buffer.alloc((3 * w + 1) * h);
  for (let y = 0; y < h; y++) {
    raw[y * (3 * w + 1)] = 0; // filter: none
    for (let x = 0; x < w; x++) {
      const o = y * (3 * w + 1) + 1 + 3 * x;
      raw[o] = (x * 4 + seed) & 255;
      raw[o + 1] = (y * 4) ^ seed;
      raw[o + 2] = seed;
    }
  }
  const chunk = (type, data) => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(data.length);
    const td = Buffer.concat([Buffer.from(type, "latin1"), data]);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(crc32(td));
    return Buffer.concat([len, td, crc]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr.set([8, 2, 0, 0, 0], 8); // 8-bit RGB
  const png = Buffer.concat([Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]), chunk("IHDR", ihdr),
    chunk("IDAT", zlib.deflateSync(raw)), chunk("IEND", Buffer.alloc(0))]);
  return png.toString("base64");
}

function crc32(buf) {
  let c = ~0;
  for (const b of buf) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = (c >>> 1) ^ (0xedb88320 & -(c & 1));
  }
  return ~c >>> 0;
}
