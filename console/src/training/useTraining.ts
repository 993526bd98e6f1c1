// One training, live: GetTraining (its state and ranks, refreshed) and
// WatchTraining from the first event (its history, then live events; the
// stream is resumed after the last sequence when it breaks or lags).
import { useEffect, useState } from "react";
import type { Training } from "../gen/cohort/v1/training_pb";
import type { RankStats, TrainingEvent } from "../gen/cohort/v1/training_events_pb";
import { aborted, api, Code, failure } from "../api/client";
import { ended } from "../format";
import { Columns, pushProgress } from "./curves";

export interface Validation {
  step: number;
  loss: number;
  mse: number;
  l0: number;
  ev: number;
  dead: number;
  best: boolean;
}

export interface TrainingView {
  training?: Training;
  notFound?: boolean;
  error?: string;
  curves: Columns;
  validations: Validation[];
  ranks: Map<number, RankStats>;
  events: TrainingEvent[];
  /** The newest progress lines' (time in s, step), for the ETA. */
  recent: [number, number][];
  /** Bumps on every change (the Columns are mutated in place). */
  version: number;
  caughtUp: boolean;
}

const KEEP_EVENTS = 500;
/** The server thins a long stored history to this many points per chart. */
export const HISTORY_POINTS = 10_000;
const REFRESH_MS = 2000;

const RECENT = 20;

function note(view: TrainingView, ev: TrainingEvent, step: bigint) {
  if (!ev.time) return;
  const t = Number(ev.time.seconds) + ev.time.nanos / 1e9;
  const last = view.recent.at(-1);
  if (last && Number(step) < last[1]) view.recent.length = 0; // a restart
  view.recent.push([t, Number(step)]);
  if (view.recent.length > RECENT) view.recent.shift();
}

/** Seconds to reach `total` at the recent rate; undefined without one. */
export function secondsLeft(recent: [number, number][], total: number): number | undefined {
  if (recent.length < 2) return undefined;
  const [t0, s0] = recent[0];
  const [t1, s1] = recent[recent.length - 1];
  if (t1 <= t0 || s1 <= s0 || total <= s1) return undefined;
  return ((total - s1) * (t1 - t0)) / (s1 - s0);
}

function record(view: TrainingView, ev: TrainingEvent) {
  const step = pushProgress(view.curves, ev);
  if (step !== undefined) {
    note(view, ev, step);
    return;
  }
  const e = ev.event;
  switch (e.case) {
    case "rankStats":
      view.ranks.set(e.value.rank, e.value);
      return;
    case "validation": {
      const v = e.value;
      view.validations.push({ step: Number(v.step), loss: v.loss, mse: v.mse, l0: v.l0, ev: v.explainedVariance, dead: v.deadFraction, best: v.best });
      break;
    }
    case "lagged":
      return;
  }
  view.events.push(ev);
  if (view.events.length > KEEP_EVENTS) view.events.splice(0, view.events.length - KEEP_EVENTS);
}

export function useTraining(id: string): TrainingView {
  const [view, setView] = useState<TrainingView>(() => fresh());
  useEffect(() => {
    const stop = new AbortController();
    const v = fresh();
    let after = 0n;
    let dirty = true;
    const publish = () => {
      if (!dirty) return;
      dirty = false;
      v.version++;
      setView({ ...v });
    };
    const get = () =>
      api.training
        .getTraining({ id }, { signal: stop.signal })
        .then((t) => {
          v.training = t;
          dirty = true;
          return t;
        })
        .catch((err) => {
          if (aborted(err)) return undefined;
          const f = failure(err);
          if (f.code === Code.NotFound) v.notFound = true;
          else v.error = f.message;
          dirty = true;
          return undefined;
        });
    const watch = async () => {
      for (let attempt = 0; !stop.signal.aborted; attempt++) {
        try {
          const stream = api.training.watchTraining({ id, afterSequence: after, includeRankStats: true, maxPoints: HISTORY_POINTS }, { signal: stop.signal });
          for await (const ev of stream) {
            if (ev.event.case === "lagged") break; // resume after the last one received
            after = ev.sequence;
            record(v, ev);
            dirty = true;
          }
          v.caughtUp = true;
          if (v.training && ended(v.training.state)) return;
          const t = await get();
          if (t && ended(t.state)) return;
        } catch (err) {
          if (aborted(err)) return;
          const f = failure(err);
          if (f.code === Code.NotFound || f.code === Code.PermissionDenied) return;
        }
        await new Promise((r) => setTimeout(r, Math.min(5000, 500 * (attempt + 1))));
      }
    };
    get().then((t) => t && watch());
    const tick = setInterval(publish, 250);
    const refresh = setInterval(() => {
      if (!v.training || !ended(v.training.state)) get();
    }, REFRESH_MS);
    return () => {
      stop.abort();
      clearInterval(tick);
      clearInterval(refresh);
    };
  }, [id]);
  return view;
}

function fresh(): TrainingView {
  return { curves: new Columns(), validations: [], ranks: new Map(), events: [], recent: [], version: 0, caughtUp: false };
}
