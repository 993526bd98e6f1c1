// The SAE frontier: final L0 against explained variance, one point per
// training (few points: an SVG, each point a link to its training).
import { Link } from "../router";
import { num } from "../format";

export interface FrontierPoint {
  id: string;
  label: string;
  l0: number;
  ev: number;
  color: string;
}

const W = 560;
const H = 320;
const PAD = { l: 56, r: 16, t: 16, b: 44 };

function extent(vs: number[]): [number, number] {
  const lo = Math.min(...vs);
  const hi = Math.max(...vs);
  const pad = hi > lo ? (hi - lo) * 0.08 : Math.max(Math.abs(hi) * 0.1, 0.01);
  return [lo - pad, hi + pad];
}

/** The frontier as steps between its points, sparsest first: what each
 * point dominates ends where the next begins. */
function staircase(on: FrontierPoint[], x: (v: number) => number, y: (v: number) => number): string {
  const sorted = [...on].sort((a, b) => a.l0 - b.l0);
  const out: string[] = [];
  sorted.forEach((p, i) => {
    if (i > 0) out.push(`${x(p.l0)},${y(sorted[i - 1].ev)}`);
    out.push(`${x(p.l0)},${y(p.ev)}`);
  });
  return out.join(" ");
}

function ticks([lo, hi]: [number, number], n = 5): number[] {
  return Array.from({ length: n }, (_, i) => lo + ((hi - lo) * i) / (n - 1));
}

/** `line`: the ids of the points on the frontier, joined by its steps. */
export function Frontier({ points, line }: { points: FrontierPoint[]; line?: string[] }) {
  const shown = points.filter((p) => Number.isFinite(p.l0) && Number.isFinite(p.ev));
  if (shown.length === 0) return <p className="muted">No training has reported L0 and explained variance yet.</p>;
  const xr = extent(shown.map((p) => p.l0));
  const yr = extent(shown.map((p) => p.ev));
  const x = (v: number) => PAD.l + ((v - xr[0]) / (xr[1] - xr[0])) * (W - PAD.l - PAD.r);
  const y = (v: number) => H - PAD.b - ((v - yr[0]) / (yr[1] - yr[0])) * (H - PAD.t - PAD.b);
  return (
    <figure className="frontier">
      <svg viewBox={`0 0 ${W} ${H}`} role="img" aria-label="final L0 against explained variance" width="100%" style={{ maxWidth: W }}>
        {ticks(xr).map((t) => (
          <g key={`x${t}`}>
            <line x1={x(t)} x2={x(t)} y1={PAD.t} y2={H - PAD.b} className="grid" />
            <text x={x(t)} y={H - PAD.b + 16} textAnchor="middle" className="tick">{num(t, 3)}</text>
          </g>
        ))}
        {ticks(yr).map((t) => (
          <g key={`y${t}`}>
            <line x1={PAD.l} x2={W - PAD.r} y1={y(t)} y2={y(t)} className="grid" />
            <text x={PAD.l - 6} y={y(t) + 4} textAnchor="end" className="tick">{num(t, 3)}</text>
          </g>
        ))}
        <text x={(W + PAD.l) / 2} y={H - 6} textAnchor="middle" className="axis">L0 (active latents per sample) →</text>
        <text transform={`translate(14 ${(H - PAD.b) / 2}) rotate(-90)`} textAnchor="middle" className="axis">explained variance →</text>
        {line && line.length > 0 && (
          <polyline
            aria-label="the frontier"
            points={staircase(shown.filter((p) => line.includes(p.id)), x, y)}
            fill="none"
            stroke="var(--muted)"
            strokeDasharray="4 3"
            strokeWidth={1.5}
          />
        )}
        {shown.map((p) => (
          <a key={p.id} href={`/trainings/${p.id}`}>
            <circle cx={x(p.l0)} cy={y(p.ev)} r={6} fill={p.color} stroke="var(--bg)" strokeWidth={1.5}>
              <title>{`${p.label}: L0 ${num(p.l0)}, explained variance ${num(p.ev)}`}</title>
            </circle>
          </a>
        ))}
      </svg>
      <figcaption className="small muted">
        Up and to the left is better: more variance explained with fewer active latents. {shown.map((p, i) => (
          <span key={p.id}>{i > 0 ? " · " : ""}<Link href={`/trainings/${p.id}`} style={{ color: p.color }}>{p.label}</Link></span>
        ))}
      </figcaption>
    </figure>
  );
}
