// A sweep's trials by rung: one line per trial through the objective it
// had at each rung it reached (ASHA, median) and its newest value, ending
// in a mark that says where it is now — running, paused at a rung, stopped
// by the searcher, finished. Few trials (at most 256): an SVG.
import type { Sweep, SweepTrial } from "../gen/cohort/v1/sweep_pb";
import { Training_State } from "../gen/cohort/v1/training_pb";
import { Link } from "../router";
import { num } from "../format";

const W = 560;
const H = 300;
const PAD = { l: 56, r: 24, t: 16, b: 44 };

export type Fate = "running" | "paused" | "stopped" | "finished" | "failed" | "waiting";

export function fate(t: SweepTrial): Fate {
  if (t.paused) return "paused";
  switch (t.state) {
    case Training_State.SUCCEEDED:
      return "finished";
    case Training_State.FAILED:
      return "failed";
    case Training_State.CANCELLED:
      return "stopped";
    case Training_State.RUNNING:
    case Training_State.SCHEDULED:
      return "running";
    default:
      return "waiting";
  }
}

const MARK: Record<Fate, string> = {
  running: "○ running",
  paused: "‖ paused at a rung",
  stopped: "× stopped",
  finished: "● finished",
  failed: "! failed",
  waiting: "· waiting",
};

function Mark({ f, x, y, color }: { f: Fate; x: number; y: number; color: string }) {
  switch (f) {
    case "finished":
      return <circle cx={x} cy={y} r={5} fill={color} />;
    case "running":
      return <circle cx={x} cy={y} r={5} fill="var(--bg)" stroke={color} strokeWidth={2} />;
    case "paused":
      return (
        <g stroke={color} strokeWidth={3}>
          <line x1={x - 3} x2={x - 3} y1={y - 6} y2={y + 6} />
          <line x1={x + 3} x2={x + 3} y1={y - 6} y2={y + 6} />
        </g>
      );
    case "stopped":
    case "failed":
      return (
        <g stroke={color} strokeWidth={2.5}>
          <line x1={x - 5} x2={x + 5} y1={y - 5} y2={y + 5} />
          <line x1={x - 5} x2={x + 5} y1={y + 5} y2={y - 5} />
        </g>
      );
    default:
      return <circle cx={x} cy={y} r={2} fill={color} />;
  }
}

/** The value a trial's line has at each column: its rungs, then now. */
function path(t: SweepTrial, columns: number, frontier: boolean): Array<[number, number]> {
  const out: Array<[number, number]> = t.rungs.map((r) => [r.rung - 1, r.value]);
  const now = frontier ? t.explainedVariance : t.objective;
  const last = out.length > 0 ? out[out.length - 1][0] : -1;
  const done = t.state === Training_State.SUCCEEDED;
  if (now !== undefined && Number.isFinite(now) && !t.paused) out.push([done ? columns - 1 : Math.min(last + 0.5, columns - 1), now]);
  return out;
}

export function Rungs({ sweep, colors }: { sweep: Sweep; colors: (i: number) => string }) {
  const rungs = Math.max(0, ...sweep.trials.flatMap((t) => t.rungs.map((r) => r.rung)));
  const frontier = sweep.objective?.metric === "frontier";
  const columns = rungs + 1;
  const lines = sweep.trials.map((t) => ({ t, pts: path(t, columns, frontier) })).filter((l) => l.pts.length > 0);
  if (rungs === 0 || lines.length === 0) return <p className="muted">No trial has reached a rung yet.</p>;
  const values = lines.flatMap((l) => l.pts.map((p) => p[1])).filter(Number.isFinite);
  const lo = Math.min(...values);
  const hi = Math.max(...values);
  const pad = hi > lo ? (hi - lo) * 0.08 : Math.max(Math.abs(hi) * 0.1, 0.01);
  const [ylo, yhi] = [lo - pad, hi + pad];
  const x = (c: number) => PAD.l + (c / Math.max(columns - 1, 1)) * (W - PAD.l - PAD.r);
  const y = (v: number) => H - PAD.b - ((v - ylo) / (yhi - ylo)) * (H - PAD.t - PAD.b);
  const label = frontier ? "explained variance" : sweep.objective?.metric ?? "objective";
  return (
    <figure className="frontier rungs">
      <svg viewBox={`0 0 ${W} ${H}`} role="img" aria-label="trials by rung" width="100%" style={{ maxWidth: W }}>
        {Array.from({ length: columns }, (_, c) => (
          <g key={`c${c}`}>
            <line x1={x(c)} x2={x(c)} y1={PAD.t} y2={H - PAD.b} className="grid" />
            <text x={x(c)} y={H - PAD.b + 16} textAnchor="middle" className="tick">{c < rungs ? `rung ${c + 1}` : "end"}</text>
          </g>
        ))}
        {[0, 0.25, 0.5, 0.75, 1].map((f) => {
          const v = ylo + (yhi - ylo) * f;
          return (
            <text key={f} x={PAD.l - 6} y={y(v) + 4} textAnchor="end" className="tick">{num(v, 3)}</text>
          );
        })}
        <text transform={`translate(14 ${(H - PAD.b) / 2}) rotate(-90)`} textAnchor="middle" className="axis">{label}</text>
        <text x={(W + PAD.l) / 2} y={H - 6} textAnchor="middle" className="axis">how far each trial got →</text>
        {lines.map(({ t, pts }) => {
          const color = colors(t.index);
          const [lx, ly] = pts[pts.length - 1];
          return (
            <a key={t.trainingId} href={`/trainings/${t.trainingId}`}>
              <polyline points={pts.map(([c, v]) => `${x(c)},${y(v)}`).join(" ")} fill="none" stroke={color} strokeWidth={1.5} />
              <Mark f={fate(t)} x={x(lx)} y={y(ly)} color={color} />
              <title>{`trial ${t.index}: ${MARK[fate(t)]}; ${t.stateReason}`}</title>
            </a>
          );
        })}
      </svg>
      <figcaption className="small muted">
        Each line is a trial through its value at each rung it reached; {Object.values(MARK).slice(0, 4).join(" · ")}.{" "}
        {sweep.trials.map((t, i) => (
          <span key={t.trainingId}>{i > 0 ? " · " : ""}<Link href={`/trainings/${t.trainingId}`} style={{ color: colors(t.index) }}>#{t.index}</Link></span>
        ))}
      </figcaption>
    </figure>
  );
}
