// Real processes for the end-to-end tests: coordinators (embedded SQLite in
// a temporary directory) and an agent with 2 simulated GPUs, from the
// workspace's debug build (COHORT_BIN overrides).
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, openSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

export const ROOT = resolve(import.meta.dirname, "../../..");
export const BIN = process.env.COHORT_BIN ?? join(ROOT, "target/debug");
const STATE = join(ROOT, "console/test-results/cluster.json");

export interface ClusterState {
  /** auth off, an agent with 2 simulated GPUs */
  open: string;
  /** --auth token, no agent */
  secured: string;
  tokens: Record<string, string>;
  pids: number[];
  dir: string;
}

function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => ok(port));
    });
    s.on("error", fail);
  });
}

function start(name: string, dir: string, bin: string, args: string[], env: Record<string, string> = {}): ChildProcess {
  const log = openSync(join(dir, `${name}.log`), "w");
  const child = spawn(join(BIN, bin), args, { stdio: ["ignore", log, log], env: { ...process.env, ...env } });
  return child;
}

async function until(what: string, probe: () => boolean, timeoutMs = 60_000) {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (probe()) return;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`timed out waiting for ${what}`);
}

function cli(url: string, args: string[], token = ""): string {
  return execFileSync(join(BIN, "cohort"), args, {
    env: { ...process.env, COHORT_COORDINATOR: url, COHORT_TOKEN: token },
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
  });
}

export async function startCluster(): Promise<ClusterState> {
  const dir = mkdtempSync(join(tmpdir(), "cohort-e2e-"));
  const [p1, p2] = [await freePort(), await freePort()];
  const open = `http://127.0.0.1:${p1}`;
  const secured = `http://127.0.0.1:${p2}`;
  const pids: number[] = [];
  pids.push(start("coordinator", dir, "cohort-coordinator", ["--listen", `127.0.0.1:${p1}`, "--data-dir", join(dir, "coordinator"), "--elastic-cooldown", "1s"]).pid!);
  pids.push(
    start("agent", dir, "cohort-agent", [
      "--coordinator", open, "--name", "e2e-host", "--address", "127.0.0.1", "--work-dir", join(dir, "agent"),
      "--rank-binary", join(BIN, "cohort-rank"), "--simulate-gpus", "2:16GiB",
    ]).pid!,
  );
  const tokens: Record<string, string> = {};
  for (const [key, team, role] of [["viewer-a", "team-a", "viewer"], ["editor-a", "team-a", "editor"], ["editor-b", "team-b", "editor"]]) {
    const out = execFileSync(join(BIN, "cohort-coordinator"), ["token", "create", "--data-dir", join(dir, "secured"), "--team", team, "--name", key, "--role", role], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
    tokens[key] = out.trim().split("\n").pop()!;
  }
  pids.push(start("secured", dir, "cohort-coordinator", ["--listen", `127.0.0.1:${p2}`, "--data-dir", join(dir, "secured"), "--auth", "token"]).pid!);
  const state: ClusterState = { open, secured, tokens, pids, dir };
  writeFileSync(STATE, JSON.stringify(state));
  await until("2 GPUs on the open coordinator", () => {
    try {
      return (cli(open, ["-o", "json", "gpus"]).match(/"uuid"/g) ?? []).length >= 2;
    } catch {
      return false;
    }
  });
  await until("the secured coordinator", () => {
    try {
      cli(secured, ["train", "list"], tokens["viewer-a"]);
      return true;
    } catch {
      return false;
    }
  });
  return state;
}

export function cluster(): ClusterState {
  return JSON.parse(readFileSync(STATE, "utf8"));
}

export function stopCluster() {
  let state: ClusterState;
  try {
    state = cluster();
  } catch {
    return;
  }
  for (const pid of state.pids) {
    try {
      process.kill(pid, "SIGTERM");
    } catch {
      /* already gone */
    }
  }
}

/** The trainings the open coordinator has not ended. */
function unended(url: string): { id: string }[] {
  const out = cli(url, ["-o", "json", "train", "list", "--all", "--state", "queued,scheduled,running,restarting"]);
  return JSON.parse(out).trainings ?? [];
}

/**
 * Cancels every sweep and training a test left on the open coordinator and
 * waits until none is left, so that the next test starts on an idle fleet
 * whatever this one did (a failed test must not fail the ones after it).
 */
export async function idleFleet() {
  const { open } = cluster();
  const sweeps: { id: string }[] = JSON.parse(cli(open, ["-o", "json", "sweep", "list"])).sweeps ?? [];
  for (const s of sweeps) {
    try {
      cli(open, ["sweep", "cancel", s.id]);
    } catch {
      /* already ended */
    }
  }
  for (const t of unended(open)) {
    try {
      cli(open, ["train", "cancel", t.id]);
    } catch {
      /* ended meanwhile */
    }
  }
  await until("every training on the open coordinator ended", () => unended(open).length === 0, 120_000);
}

export { cli };
