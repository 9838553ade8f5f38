// Shared by the real-client tests: start `lily serve --demo` on a free port.
import { spawn } from "node:child_process";

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

