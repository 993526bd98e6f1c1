// An elastic training's size over time: a step line from each attempt's
// `started` event (its world size) to now, with its range drawn as bounds.
import type { TrainingEvent } from "../gen/cohort/v1/training_events_pb";

export type SizePoint = { at: number; size: number };

/** The sizes the training ran at, oldest first (one per attempt that started). */
export function sizeSteps(events: TrainingEvent[]): SizePoint[] {
  const out: SizePoint[] = [];
  for (const ev of events) {
    if (ev.event.case !== "started" || !ev.time) continue;
    const at = Number(ev.time.seconds) * 1000 + Math.floor(ev.time.nanos / 1e6);
    const size = ev.event.value.worldSize;
    if (out.length === 0 || out[out.length - 1].size !== size) out.push({ at, size });
  }
  return out;
}

const W = 640;
const H = 90;
const PAD = 28;

export function Sizes({ events, min, max, now }: { events: TrainingEvent[]; min: number; max: number; now: number }) {
  const steps = sizeSteps(events);
  if (steps.length === 0) return <p className="muted small">Not started yet: it starts at the largest of {min}..{max} GPUs that fits.</p>;
  const t0 = steps[0].at;
  const t1 = Math.max(now, steps[steps.length - 1].at + 1);
  const x = (t: number) => PAD + ((t - t0) / (t1 - t0)) * (W - 2 * PAD);
  const y = (s: number) => H - PAD / 2 - (s / max) * (H - PAD);
  let path = "";
  steps.forEach((p, i) => {
    const end = i + 1 < steps.length ? steps[i + 1].at : t1;
    path += `${i === 0 ? "M" : "L"}${x(p.at).toFixed(1)},${y(p.size).toFixed(1)} L${x(end).toFixed(1)},${y(p.size).toFixed(1)} `;
  });
  const said = steps.map((p) => `${p.size} from ${new Date(p.at).toLocaleTimeString()}`).join(", ");
  return (
    <figure className="sizes">
      <svg viewBox={`0 0 ${W} ${H}`} role="img" aria-label={`size over time: ${said}`} width="100%" height={H}>
        <line x1={PAD} x2={W - PAD} y1={y(min)} y2={y(min)} className="bound" strokeDasharray="4 4" />
        <line x1={PAD} x2={W - PAD} y1={y(max)} y2={y(max)} className="bound" strokeDasharray="4 4" />
        <text x={2} y={y(max) + 4} className="axis">{max}</text>
        <text x={2} y={y(min) + 4} className="axis">{min}</text>
        <path d={path} className="size-line" fill="none" />
        {steps.map((p) => (
          <text key={p.at} x={x(p.at) + 3} y={y(p.size) - 4} className="axis">{p.size}</text>
        ))}
      </svg>
      <figcaption className="muted small">GPUs over time (range {min}..{max}, dashed)</figcaption>
    </figure>
  );
}
