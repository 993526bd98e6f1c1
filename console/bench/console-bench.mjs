// The console's benchmark (not a test): real coordinator, agent and Debian
// Chromium; prints figures. See docs/benchmarks.md ("The web console").
//
//   node console/bench/console-bench.mjs [--agents 1000] [--points 100000] [--runs 5]
//
// 1. initial JavaScript: gzipped bytes of what index.html loads;
// 2. the fleet page usable: navigation to both GPU cards drawn, median of runs;
// 3. a training with N progress points (a program that prints them) drawn:
//    navigation to its loss chart holding the (server-thinned) curve, and a
//    raw uPlot draw of all N points in the page;
// 4. the fleet page with --agents simulated agents x 8 GPUs at 1 Hz
//    (cohort-bench-telemetry): time to the first cards, and frame times
//    while live samples stream in, per-GPU and aggregated.
import { chromium } from "@playwright/test";
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, openSync, readFileSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { gzipSync } from "node:zlib";

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith("--") ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
const AGENTS = Number(args.agents ?? 1000);
const POINTS = Number(args.points ?? 100_000);
const RUNS = Number(args.runs ?? 5);
const ROOT = resolve(import.meta.dirname, "../..");
const BIN = args.bin ?? (existsSync(join(ROOT, "target/release/cohort-coordinator")) ? join(ROOT, "target/release") : join(ROOT, "target/debug"));
const PYTHON = join(ROOT, ".venv/bin/python");
const dir = mkdtempSync(join(tmpdir(), "cohort-console-bench-"));
const children = [];
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const pct = (xs, p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];

function port() {
  return new Promise((ok) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const p = s.address().port;
      s.close(() => ok(p));
    });
  });
}
function start(name, bin, argv) {
  const log = openSync(join(dir, `${name}.log`), "w");
  const child = spawn(join(BIN, bin), argv, { stdio: ["ignore", log, log] });
  children.push(child);
  return child;
}
const cli = (url, argv) => execFileSync(join(BIN, "cohort"), argv, { env: { ...process.env, COHORT_COORDINATOR: url }, encoding: "utf8" });
async function until(what, probe, ms = 120_000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    try {
      if (await probe()) return;
    } catch {}
    await new Promise((r) => setTimeout(r, 500));
  }
  throw new Error(`timed out: ${what}`);
}
function cleanup() {
  for (const c of children) c.kill("SIGTERM");
}
process.on("exit", cleanup);

// 1. The initial JavaScript and CSS.
const dist = join(ROOT, "console/dist");
const html = readFileSync(join(dist, "index.html"), "utf8");
const assets = [...html.matchAll(/(?:src|href)="\/(assets\/[^"]+)"/g)].map((m) => m[1]);
let js = 0, css = 0;
for (const a of assets) {
  const gz = gzipSync(readFileSync(join(dist, a))).length;
  if (a.endsWith(".js")) js += gz;
  else if (a.endsWith(".css")) css += gz;
}
console.log(`binaries: ${BIN}`);
console.log(`initial JavaScript: ${(js / 1024).toFixed(1)} KiB gzipped (CSS ${(css / 1024).toFixed(1)} KiB)`);

const p1 = await port();
const url = `http://127.0.0.1:${p1}`;
start("coordinator", "cohort-coordinator", ["--listen", `127.0.0.1:${p1}`, "--data-dir", join(dir, "coordinator")]);
start("agent", "cohort-agent", ["--coordinator", url, "--name", "bench-host", "--address", "127.0.0.1", "--work-dir", join(dir, "agent"),
  "--rank-binary", existsSync(join(BIN, "cohort-rank")) ? join(BIN, "cohort-rank") : join(ROOT, "target/debug/cohort-rank"), "--simulate-gpus", "2:16GiB", "--program-root", join(ROOT, "console/bench"), "--program-sandbox", "none"]);
await until("2 GPUs", () => (cli(url, ["-o", "json", "gpus"]).match(/"uuid"/g) ?? []).length >= 2);

const browser = await chromium.launch({ executablePath: process.env.COHORT_CHROMIUM ?? "/usr/bin/chromium" });
const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });

// 2. The fleet page usable: both cards with their numbers, from navigation start.
const fleet = [];
for (let i = 0; i < RUNS; i++) {
  await page.goto("about:blank");
  const t0 = Date.now();
  await page.goto(`${url}/`);
  await page.getByRole("article").nth(1).getByText("util").waitFor();
  fleet.push(Date.now() - t0);
}
console.log(`fleet page usable (2 GPUs): median ${median(fleet)} ms over ${RUNS} loads (${fleet.join(", ")})`);

// 3. A training with POINTS progress points.
const toml = join(dir, "points.toml");
writeFileSync(toml, `[program]\ncommand = ["${PYTHON}", "${join(ROOT, "console/bench/points.py")}", "${POINTS}"]\nworking_dir = "${join(ROOT, "console/bench")}"\nmemory_gib_per_rank = 1\n`);
const t0 = Date.now();
const id = cli(url, ["train", "submit", "-q", "--config", toml, "--gpus", "1"]).trim();
await until("the points training to end", () => /SUCCEEDED|FAILED/.test(cli(url, ["train", "get", id, "--no-history"])), 600_000);
console.log(`training ${id}: ${POINTS} points stored in ${((Date.now() - t0) / 1000).toFixed(1)} s (${cli(url, ["train", "get", id, "--no-history"]).match(/state:\s+(\w+)/)[1]})`);
const draw = [];
let drawn = 0;
for (let i = 0; i < RUNS; i++) {
  await page.goto("about:blank");
  const start = Date.now();
  await page.goto(`${url}/trainings/${id}`);
  const chart = page.getByRole("img", { name: "loss" });
  await page.waitForFunction(() => Number(document.querySelector('[aria-label="loss"]')?.getAttribute("data-points") ?? 0) > 1000 && document.querySelector('[aria-label="loss"] canvas'));
  draw.push(Date.now() - start);
  drawn = Number(await chart.getAttribute("data-points"));
}
console.log(`training page with ${POINTS} points: loss chart drawn (${drawn} points after the server's thinning) median ${median(draw)} ms over ${RUNS} loads (${draw.join(", ")})`);
// uPlot itself drawing all N points (its own build, on a blank page).
await page.goto("about:blank");
await page.addStyleTag({ path: join(ROOT, "console/node_modules/uplot/dist/uPlot.min.css") });
await page.addScriptTag({ path: join(ROOT, "console/node_modules/uplot/dist/uPlot.iife.min.js") });
const rawDraw = await page.evaluate(async (n) => {
  const xs = Float64Array.from({ length: n }, (_, i) => i);
  const ys = Float64Array.from({ length: n }, (_, i) => 1 / (1 + i * 1e-3) + 0.01 * Math.sin(i));
  const el = document.createElement("div");
  document.body.append(el);
  const t = performance.now();
  new window.uPlot({ width: 1200, height: 300, series: [{}, { stroke: "blue" }] }, [xs, ys], el);
  await new Promise((r) => requestAnimationFrame(() => r()));
  return performance.now() - t;
}, POINTS);
console.log(`uPlot drawing all ${POINTS} points at once: ${rawDraw.toFixed(0)} ms (to the next frame)`);

// 4. A big fleet: simulated agents streaming samples.
if (AGENTS > 0) {
  const sim = spawn(join(BIN, "cohort-bench-telemetry"), ["--coordinator", url, "--agents", String(AGENTS), "--watchers", "0", "--duration", "600s", "--warmup", "5s"], { stdio: ["ignore", openSync(join(dir, "sim.log"), "w"), openSync(join(dir, "sim.err"), "w")] });
  children.push(sim);
  await until(`${AGENTS} agents registered`, () => /agents registered/.test(readFileSync(join(dir, "sim.err"), "utf8")), 180_000);
  // A few seconds of samples, so the cards have something to show.
  await new Promise((r) => setTimeout(r, 5_000));
  await page.goto("about:blank");
  const s0 = Date.now();
  await page.goto(`${url}/`);
  await page.getByRole("article").nth(47).getByText("util").waitFor({ timeout: 60_000 });
  const firstCards = Date.now() - s0;
  const frames = async () =>
    page.evaluate(
      () =>
        new Promise((done) => {
          const deltas = [];
          let last = performance.now();
          const end = last + 10_000;
          const tick = (now) => {
            deltas.push(now - last);
            last = now;
            if (now < end) requestAnimationFrame(tick);
            else done(deltas);
          };
          requestAnimationFrame(tick);
        }),
    );
  const perGpu = await frames();
  const search0 = Date.now();
  await page.getByRole("searchbox").fill(`-${String(Math.floor(AGENTS / 2)).padStart(5, "0")}`);
  await page.getByRole("article").first().waitFor();
  const searchMs = Date.now() - search0;
  await page.getByRole("radio", { name: "Aggregated" }).click();
  await page.getByRole("region", { name: "fleet totals" }).getByText(String(AGENTS * 8 + 2)).first().waitFor({ timeout: 30_000 }).catch(() => {});
  const aggregated = await frames();
  const describe = (d) => `median ${median(d).toFixed(1)} ms, p99 ${pct(d, 0.99).toFixed(1)} ms, longest ${Math.max(...d).toFixed(0)} ms, ${d.length} frames in 10 s`;
  console.log(`fleet of ${AGENTS} agents x 8 GPUs: first page of 48 cards drawn in ${firstCards} ms; search to a card ${searchMs} ms`);
  console.log(`  frame times per-GPU view: ${describe(perGpu)}`);
  console.log(`  frame times aggregated view: ${describe(aggregated)}`);
}
await browser.close();
cleanup();
process.exit(0);
