// A training's curves as columns (one x array, one array per metric),
// appended from its events. At most MAX_POINTS points are kept: past that,
// every other point is dropped (the chart keeps the curve's shape), so a
// long training never grows the page without bound.
export const MAX_POINTS = 200_000;

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
