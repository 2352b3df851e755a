// Starts a real `hivemind serve` for the tests: on the embedded store in a fresh folder, with a
// tokens file, on a free port. `HIVEMIND` names the command (default: `hivemind` on PATH).
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, writeFileSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const ALICE = "alice-0123456789abcdef";
export const BOB = "bob-0123456789abcdef00";
export const OPS = "ops-0123456789abcdef00";

const TOKENS = `
[[token]]
secret = "${ALICE}"
ns = ["team-a"]
agent = "alice"
rights = ["write", "query"]

[[token]]
secret = "${BOB}"
ns = ["team-a"]
agent = "bob"
rights = ["write", "query"]

[[token]]
secret = "${OPS}"
ns = ["*"]
agent = "ops"
rights = ["write", "query", "admin"]
`;

export interface Served {
  base: string;
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      const port = typeof addr === "object" && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

export async function serve(): Promise<Served> {
  const dir = mkdtempSync(join(tmpdir(), "hivemind-ts-"));
  writeFileSync(join(dir, "tokens.toml"), TOKENS);
  const port = await freePort();
  const [cmd, ...pre] = (process.env.HIVEMIND ?? "hivemind").split(" ");
  const env = Object.fromEntries(Object.entries(process.env)
    .filter(([k]) => !k.startsWith("HIVEMIND_")));
  const errLog = join(dir, "serve.err");
  const { openSync } = await import("node:fs");
  const child: ChildProcess = spawn(cmd ?? "hivemind", [...pre, "serve", "--redis-url",
    `memory://${join(dir, "data")}`, "--tokens", join(dir, "tokens.toml"), "--port",
    String(port)], { cwd: dir, env, stdio: ["ignore", "ignore", openSync(errLog, "w")] });
  const base = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      const r = await fetch(`${base}/healthz`);
      if (r.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline || child.exitCode !== null) {
      child.kill("SIGKILL");
      throw new Error(`hivemind serve did not start: ${readFileSync(errLog, "utf8").slice(-2000)}`);
    }
    await new Promise((r) => setTimeout(r, 50)); // waiting for another process to open its port
  }
  return {
    base,
    stop: () => new Promise<void>((resolve) => {
      child.once("exit", () => resolve());
      child.kill("SIGTERM");
    }),
  };
}
