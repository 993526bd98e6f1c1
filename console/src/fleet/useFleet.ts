// The fleet's state for the fleet page: every GPU (ListGpus, refreshed),
// an hour of history per GPU and for the fleet (QueryGpuMetrics), then live
// samples from one WatchGpuMetrics stream that feeds every card. Updates
// are published at most once a second, whatever the fleet's size.
import { useEffect, useState } from "react";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import type { Gpu } from "../gen/cohort/v1/gpu_pb";
import type { GpuSample } from "../gen/cohort/v1/common_pb";
import { MetricsView } from "../gen/cohort/v1/telemetry_pb";
import { aborted, api, failure } from "../api/client";
import { append, emptyPoints, WINDOW_S, type Point, type Points } from "./history";

export interface FleetState {
  gpus: Gpu[];
  latest: Map<string, GpuSample>;
  history: Map<string, Points>;
  aggregate: Points;
  loaded: boolean;
  error?: string;
}

const HISTORY_STEP_S = 30;
const REFRESH_MS = 10_000;
const PUBLISH_MS = 1_000;

function point(s: GpuSample): Point {
  return {
    t: s.time ? timestampMs(s.time) / 1000 : Date.now() / 1000,
    util: s.utilizationGpuPercent,
    mem: Number(s.memoryTotalBytes) > 0 ? (100 * Number(s.memoryUsedBytes)) / Number(s.memoryTotalBytes) : undefined,
    temp: s.temperatureCelsius,
    power: s.powerDrawWatts,
  };
}

/** The fleet's point at time t from the latest sample of every GPU. */
export function fleetPoint(t: number, samples: Iterable<GpuSample>): Point {
  let n = 0, util = 0, used = 0, total = 0, temp = -Infinity, power = 0;
  for (const s of samples) {
    n++;
    util += s.utilizationGpuPercent ?? 0;
    used += Number(s.memoryUsedBytes);
    total += Number(s.memoryTotalBytes);
    temp = Math.max(temp, s.temperatureCelsius ?? -Infinity);
    power += s.powerDrawWatts ?? 0;
  }
  if (n === 0) return { t };
  return { t, util: util / n, mem: total > 0 ? (100 * used) / total : undefined, temp: Number.isFinite(temp) ? temp : undefined, power };
}

async function listGpus(signal: AbortSignal): Promise<Gpu[]> {
  const all: Gpu[] = [];
  let pageToken = "";
  do {
    const page = await api.gpu.listGpus({ pageSize: 1000, pageToken }, { signal });
    all.push(...page.gpus);
    pageToken = page.nextPageToken;
  } while (pageToken && all.length < 20_000);
  return all;
}

async function loadHistory(signal: AbortSignal) {
  const now = Date.now();
  const range = {
    startTime: { seconds: BigInt(Math.floor(now / 1000 - WINDOW_S)), nanos: 0 },
    endTime: { seconds: BigInt(Math.floor(now / 1000)), nanos: 0 },
    step: { seconds: BigInt(HISTORY_STEP_S), nanos: 0 },
  };
  const history = new Map<string, Points>();
  let aggregate = emptyPoints();
  let pageToken = "";
  for (let pages = 0; pages < 50; pages++) {
    const r = await api.telemetry.queryGpuMetrics({ ...range, view: MetricsView.PER_GPU, pageSize: 1000, pageToken }, { signal });
    for (const u of r.updates)
      for (const g of u.gpus)
        if (g.sample) history.set(g.sample.gpuUuid, append(history.get(g.sample.gpuUuid) ?? emptyPoints(), point(g.sample), 1));
    pageToken = r.nextPageToken;
    if (!pageToken) break;
  }
  const agg = await api.telemetry.queryGpuMetrics({ ...range, view: MetricsView.AGGREGATED, pageSize: 1000 }, { signal });
  for (const u of agg.updates) {
    const a = u.aggregate;
    if (!a || !u.time) continue;
    const total = Number(a.memoryTotalBytes);
    aggregate = append(aggregate, {
      t: timestampMs(u.time) / 1000,
      util: a.meanUtilizationGpuPercent,
      mem: total > 0 ? (100 * Number(a.memoryUsedBytes)) / total : undefined,
      temp: a.maxTemperatureCelsius,
      power: a.powerDrawWatts,
    }, 1);
  }
  return { history, aggregate };
}

export function useFleet(): FleetState {
  const [state, setState] = useState<FleetState>({ gpus: [], latest: new Map(), history: new Map(), aggregate: emptyPoints(), loaded: false });
  useEffect(() => {
    const stop = new AbortController();
    let gpus: Gpu[] = [];
    const latest = new Map<string, GpuSample>();
    let history = new Map<string, Points>();
    let aggregate = emptyPoints();
    let dirty = false;
    let loaded = false;
    const fail = (err: unknown) => {
      if (!aborted(err)) setState((s) => ({ ...s, error: failure(err).message }));
    };
    const publish = () => {
      if (!dirty) return;
      dirty = false;
      setState({ gpus, latest: new Map(latest), history: new Map(history), aggregate, loaded });
    };
    const refresh = () =>
      listGpus(stop.signal)
        .then((list) => {
          gpus = list;
          for (const g of list) if (g.latestSample && !latest.has(g.latestSample.gpuUuid)) latest.set(g.latestSample.gpuUuid, g.latestSample);
          loaded = dirty = true;
          publish();
        })
        .catch(fail);
    refresh().then(() =>
      loadHistory(stop.signal)
        .then((h) => {
          // Live points that came while the history loaded are kept after it.
          for (const [uuid, pts] of history) {
            let merged = h.history.get(uuid) ?? emptyPoints();
            pts.t.forEach((t, i) => (merged = append(merged, { t, util: pts.util[i] ?? undefined, mem: pts.mem[i] ?? undefined, temp: pts.temp[i] ?? undefined, power: pts.power[i] ?? undefined })));
            h.history.set(uuid, merged);
          }
          history = h.history;
          aggregate = h.aggregate;
          dirty = true;
        })
        .catch(fail),
    );
    (async () => {
      const stream = api.telemetry.watchGpuMetrics({ view: MetricsView.PER_GPU }, { signal: stop.signal });
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
      if (latest.size > 0) aggregate = append(aggregate, fleetPoint(Date.now() / 1000, latest.values()));
      publish();
    }, PUBLISH_MS);
    const reload = setInterval(refresh, REFRESH_MS);
    return () => {
      stop.abort();
      clearInterval(tick);
      clearInterval(reload);
    };
  }, []);
  return state;
}
