// The curves of several trainings for the comparison page, loaded one
// training at a time (a browser holds at most 6 connections to a plaintext
// origin): each stream reads the stored history, thinned by the server, and
// is closed once the history has been read (it ends by itself for an ended
// training; a running one is read again later from where it stopped).
import { aborted, api } from "../api/client";
import { Columns, pushProgress } from "../training/curves";

const POINTS = 2_000;
/** A running training's history is taken as read after this long with no event. */
const QUIET_MS = 400;

export interface Loaded {
  curves: Columns;
  after: bigint;
}

export async function loadCurves(id: string, from: Loaded | undefined, signal: AbortSignal): Promise<Loaded> {
  const loaded: Loaded = from ?? { curves: new Columns(), after: 0n };
  const stop = new AbortController();
  const onAbort = () => stop.abort();
  signal.addEventListener("abort", onAbort);
  let timer: ReturnType<typeof setTimeout> | undefined;
  const quiet = () => {
    clearTimeout(timer);
    timer = setTimeout(() => stop.abort(), QUIET_MS);
  };
  try {
    quiet();
    const stream = api.training.watchTraining({ id, afterSequence: loaded.after, maxPoints: POINTS }, { signal: stop.signal });
    for await (const ev of stream) {
      quiet();
      loaded.after = ev.sequence;
      pushProgress(loaded.curves, ev);
    }
  } catch (err) {
    if (!aborted(err) || signal.aborted) throw err;
  } finally {
    clearTimeout(timer);
    signal.removeEventListener("abort", onAbort);
  }
  return loaded;
}

/** Series of several trainings on one x axis (the union of their steps). */
export function overlaid(runs: Columns[], key: string): (number | null)[][] {
  const xs = [...new Set(runs.flatMap((c) => c.x))].sort((a, b) => a - b);
  const index = new Map(xs.map((x, i) => [x, i]));
  const series = runs.map((c) => {
    const col = c.cols.get(key);
    const out: (number | null)[] = new Array(xs.length).fill(null);
    if (col) c.x.forEach((x, i) => (out[index.get(x)!] = col[i]));
    return out;
  });
  return [xs, ...series];
}
