// A training's curves as columns (one x array, one array per metric),
// appended from its events. At most MAX_POINTS points are kept: past that,
// every other point is dropped (the chart keeps the curve's shape), so a
// long training never grows the page without bound.
import type { TrainingEvent } from "../gen/cohort/v1/training_events_pb";

export const MAX_POINTS = 200_000;

/** Series colours, in order, for charts with one series per metric or training. */
export const PALETTE = ["#2f6fdf", "#d8663a", "#3a9d5d", "#8a4fd8", "#b8860b", "#0e8a8a", "#c2185b", "#6b7280", "#1b998b", "#e4572e"];

export class Columns {
  x: number[] = [];
  cols = new Map<string, (number | null)[]>();
  every = 1;
  private seen = 0;

  push(x: number, values: Record<string, number | undefined>) {
    this.seen++;
    if (this.seen % this.every !== 0) return;
    const n = this.x.length;
    this.x.push(x);
    for (const [k, v] of Object.entries(values)) {
      let col = this.cols.get(k);
      if (!col) {
        col = new Array(n).fill(null);
        this.cols.set(k, col);
      }
      col.push(v === undefined || Number.isNaN(v) ? null : v);
    }
    for (const col of this.cols.values()) if (col.length < n + 1) col.push(null);
    if (this.x.length > MAX_POINTS) this.halve();
  }

  private halve() {
    const odd = <T,>(a: T[]) => a.filter((_, i) => i % 2 === 0);
    this.x = odd(this.x);
    for (const [k, col] of this.cols) this.cols.set(k, odd(col));
    this.every *= 2;
  }

  /** [x, col(k) for k of keys]: what a chart draws. */
  data(keys: string[]): (number | null)[][] {
    return [this.x, ...keys.map((k) => this.cols.get(k) ?? new Array(this.x.length).fill(null))];
  }

  has(key: string): boolean {
    return this.cols.get(key)?.some((v) => v !== null) ?? false;
  }

  keys(): string[] {
    return [...this.cols.keys()];
  }
}

/** Aligns sparse points (validation) to the progress x axis, for overlays. */
export function overlay(x: number[], points: Map<number, number>): (number | null)[] {
  if (points.size === 0) return new Array(x.length).fill(null);
  const out: (number | null)[] = new Array(x.length).fill(null);
  let j = 0;
  const steps = [...points.keys()].sort((a, b) => a - b);
  for (const s of steps) {
    while (j < x.length - 1 && x[j] < s) j++;
    if (j < x.length) out[j] = points.get(s) ?? null;
  }
  return out;
}

/** Adds a progress event (the SAE's or a program's) to `curves`; its step,
 * or undefined for any other event. */
export function pushProgress(curves: Columns, ev: TrainingEvent): bigint | undefined {
  const e = ev.event;
  if (e.case === "progress") {
    const p = e.value;
    curves.push(Number(p.step), {
      loss: p.loss, mse: p.mse, l0: p.l0, explained_variance: p.explainedVariance, dead_fraction: p.deadFraction,
      learning_rate: p.learningRate, grad_norm: p.gradNorm, samples_per_sec: p.samplesPerSec,
    });
    return p.step;
  }
  if (e.case === "programProgress") {
    const p = e.value;
    curves.push(Number(p.step), { ...(p.loss !== undefined ? { loss: p.loss } : {}), ...p.metrics });
    return p.step;
  }
  return undefined;
}
