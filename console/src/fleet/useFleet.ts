// The fleet page's data, sized for a fleet of thousands of GPUs: the GPU
// list (ListGpus, refreshed); for the cards on screen only, an hour of
// history (QueryGpuMetrics) then live samples from one WatchGpuMetrics
// stream filtered to them; for the aggregated view, the fleet's aggregate
// (history, then its own live stream while that view is shown). Updates are
// published at most once a second whatever the fleet's size.
import { useEffect, useState } from "react";
import { timestampMs, type Timestamp } from "@bufbuild/protobuf/wkt";
import type { Gpu } from "../gen/cohort/v1/gpu_pb";
import type { GpuSample } from "../gen/cohort/v1/common_pb";
import { MetricsView, type AggregatedGpuMetrics } from "../gen/cohort/v1/telemetry_pb";
import { aborted, api, failure } from "../api/client";
import { append, emptyPoints, merge, WINDOW_S, type Point, type Points } from "./history";

const HISTORY_STEP_S = 30;
const REFRESH_MS = 10_000;
const PUBLISH_MS = 1_000;
const MAX_GPUS = 20_000;

function point(s: GpuSample): Point {
  return {
    t: s.time ? timestampMs(s.time) / 1000 : Date.now() / 1000,
    util: s.utilizationGpuPercent,
    mem: Number(s.memoryTotalBytes) > 0 ? (100 * Number(s.memoryUsedBytes)) / Number(s.memoryTotalBytes) : undefined,
    temp: s.temperatureCelsius,
    power: s.powerDrawWatts,
  };
}

export function aggregatePoint(time: Timestamp | undefined, a: AggregatedGpuMetrics): Point {
  const total = Number(a.memoryTotalBytes);
  return {
    t: time ? timestampMs(time) / 1000 : Date.now() / 1000,
    util: a.meanUtilizationGpuPercent,
    mem: total > 0 ? (100 * Number(a.memoryUsedBytes)) / total : undefined,
    temp: a.maxTemperatureCelsius,
    power: a.powerDrawWatts,
  };
}

function lastHour() {
  const now = Math.floor(Date.now() / 1000);
  return {
    startTime: { seconds: BigInt(now - WINDOW_S), nanos: 0 },
    endTime: { seconds: BigInt(now), nanos: 0 },
    step: { seconds: BigInt(HISTORY_STEP_S), nanos: 0 },
  };
}

/** Every GPU (ListGpus, all pages), refreshed every 10 s. */
export function useGpuList(): { gpus: Gpu[]; loaded: boolean; error?: string; reload: () => void } {
  const [state, setState] = useState<{ gpus: Gpu[]; loaded: boolean; error?: string }>({ gpus: [], loaded: false });
  const [generation, setGeneration] = useState(0);
  useEffect(() => {
    const stop = new AbortController();
    const load = async () => {
      const all: Gpu[] = [];
      let pageToken = "";
      do {
        const page = await api.gpu.listGpus({ pageSize: 1000, pageToken }, { signal: stop.signal });
        all.push(...page.gpus);
        pageToken = page.nextPageToken;
      } while (pageToken && all.length < MAX_GPUS);
      setState({ gpus: all, loaded: true });
    };
    const run = () => load().catch((err) => !aborted(err) && setState((s) => ({ ...s, error: failure(err).message })));
    run();
    const timer = setInterval(run, REFRESH_MS);
    return () => {
      stop.abort();
      clearInterval(timer);
    };
  }, [generation]);
  return { ...state, reload: () => setGeneration((g) => g + 1) };
}

export interface CardData {
  latest: Map<string, GpuSample>;
  history: Map<string, Points>;
  error?: string;
}

/** History then live samples of the GPUs on screen (one stream for all of them). */
export function useGpuCards(uuids: string[]): CardData {
  const [data, setData] = useState<CardData>({ latest: new Map(), history: new Map() });
  const key = uuids.join(",");
  useEffect(() => {
    if (!key) return;
    const gpuUuids = key.split(",");
    const stop = new AbortController();
    const latest = new Map<string, GpuSample>();
    let history = new Map<string, Points>();
    let dirty = false;
    const fail = (err: unknown) => !aborted(err) && setData((d) => ({ ...d, error: failure(err).message }));
    (async () => {
      const loaded = new Map<string, Points>();
      let pageToken = "";
      do {
        const r = await api.telemetry.queryGpuMetrics({ ...lastHour(), filter: { gpuUuids }, view: MetricsView.PER_GPU, pageSize: 1000, pageToken }, { signal: stop.signal });
        for (const u of r.updates)
          for (const g of u.gpus) if (g.sample) loaded.set(g.sample.gpuUuid, append(loaded.get(g.sample.gpuUuid) ?? emptyPoints(), point(g.sample), 1));
        pageToken = r.nextPageToken;
      } while (pageToken);
      // Live points that came while the history loaded are kept after it.
      for (const [uuid, live] of history) loaded.set(uuid, merge(loaded.get(uuid) ?? emptyPoints(), live));
      history = loaded;
      dirty = true;
    })().catch(fail);
    (async () => {
      const stream = api.telemetry.watchGpuMetrics({ view: MetricsView.PER_GPU, filter: { gpuUuids } }, { signal: stop.signal });
      for await (const update of stream) {
        for (const g of update.gpus) {
          const s = g.sample;
          if (!s) continue;
          latest.set(s.gpuUuid, s);
          history.set(s.gpuUuid, append(history.get(s.gpuUuid) ?? emptyPoints(), point(s)));
        }
        dirty = true;
      }
    })().catch(fail);
    const tick = setInterval(() => {
      if (!dirty) return;
      dirty = false;
      setData({ latest: new Map(latest), history: new Map(history) });
    }, PUBLISH_MS);
    return () => {
      stop.abort();
      clearInterval(tick);
    };
  }, [key]);
  return data;
}

export interface Aggregate {
  now?: AggregatedGpuMetrics;
  history: Points;
  error?: string;
}

/** The fleet's aggregate: an hour of history, then live (its own stream). */
export function useAggregate(): Aggregate {
  const [data, setData] = useState<Aggregate>({ history: emptyPoints() });
  useEffect(() => {
    const stop = new AbortController();
    let history = emptyPoints();
    let now: AggregatedGpuMetrics | undefined;
    let dirty = false;
    const fail = (err: unknown) => !aborted(err) && setData((d) => ({ ...d, error: failure(err).message }));
    (async () => {
      let loaded = emptyPoints();
      let pageToken = "";
      do {
        const r = await api.telemetry.queryGpuMetrics({ ...lastHour(), view: MetricsView.AGGREGATED, pageSize: 1000, pageToken }, { signal: stop.signal });
        for (const u of r.updates) if (u.aggregate) loaded = append(loaded, aggregatePoint(u.time, u.aggregate), 1);
        pageToken = r.nextPageToken;
      } while (pageToken);
      history = merge(loaded, history);
      dirty = true;
    })().catch(fail);
    (async () => {
      const stream = api.telemetry.watchGpuMetrics({ view: MetricsView.AGGREGATED }, { signal: stop.signal });
      for await (const u of stream) {
        if (!u.aggregate) continue;
        now = u.aggregate;
        history = append(history, aggregatePoint(u.time, u.aggregate));
        dirty = true;
      }
    })().catch(fail);
    const tick = setInterval(() => {
      if (!dirty) return;
      dirty = false;
      setData({ now, history });
    }, PUBLISH_MS);
    return () => {
      stop.abort();
      clearInterval(tick);
    };
  }, []);
  return data;
}
