// A bounded time series per GPU (and one for the fleet): the last hour at
// most, appended live and thinned to one point per `every` seconds.
export interface Points {
  t: number[];
  util: (number | null)[];
  mem: (number | null)[];
  temp: (number | null)[];
  power: (number | null)[];
}

export const WINDOW_S = 3600;
const MAX_POINTS = 1000;

export function emptyPoints(): Points {
  return { t: [], util: [], mem: [], temp: [], power: [] };
}

export interface Point {
  t: number;
  util?: number;
  mem?: number;
  temp?: number;
  power?: number;
}

/** Appends (or, within `every` seconds of the last point, replaces the last
 * point), drops what is older than the window, and returns new arrays so
 * React and the charts see a change. */
export function append(p: Points, x: Point, every = 5): Points {
  const n = p.t.length;
  const replace = n > 0 && x.t - p.t[n - 1] < every;
  const keepFrom = (() => {
    const cutoff = x.t - WINDOW_S;
    let i = 0;
    while (i < n && p.t[i] < cutoff) i++;
    return Math.max(i, n + (replace ? 0 : 1) - MAX_POINTS);
  })();
  const end = replace ? n - 1 : n;
  const take = <T,>(a: T[], v: T) => [...a.slice(keepFrom, end), v];
  return {
    t: take(p.t, x.t),
    util: take(p.util, x.util ?? null),
    mem: take(p.mem, x.mem ?? null),
    temp: take(p.temp, x.temp ?? null),
    power: take(p.power, x.power ?? null),
  };
}

/** `live` appended after `history` (the live points that came while the
 * history loaded). */
export function merge(history: Points, live: Points, every = 5): Points {
  let out = history;
  live.t.forEach((t, i) => {
    out = append(out, { t, util: live.util[i] ?? undefined, mem: live.mem[i] ?? undefined, temp: live.temp[i] ?? undefined, power: live.power[i] ?? undefined }, every);
  });
  return out;
}
