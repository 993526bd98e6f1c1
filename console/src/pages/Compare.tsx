// `/compare?sweep=NAME` or `/compare?ids=A,B,...`: trainings side by side —
// their curves overlaid, the L0 / explained-variance frontier, a table.
import { useEffect, useState } from "react";
import type { Training } from "../gen/cohort/v1/training_pb";
import { aborted, api, failure } from "../api/client";
import { LineChart } from "../charts/LineChart";
import { loadCurves, overlaid, type Loaded } from "../compare/history";
import { Frontier } from "../compare/Frontier";
import { ended, num, stateName } from "../format";
import { Link, setQuery, useLocation } from "../router";
import { PALETTE } from "../training/curves";

const METRICS = ["loss", "mse", "l0", "explained_variance", "dead_fraction", "learning_rate", "grad_norm", "samples_per_sec"];
const MAX_TRAININGS = 64;
const REFRESH_MS = 5_000;

/** What tells the trainings apart: the labels whose values differ. */
function varying(trainings: Training[]): string[] {
  const keys = new Set(trainings.flatMap((t) => Object.keys(t.labels)));
  return [...keys].filter((k) => k !== "sweep" && new Set(trainings.map((t) => t.labels[k])).size > 1).sort();
}

function short(t: Training, keys: string[]): string {
  const parts = keys.map((k) => `${k.split(".").pop()}=${t.labels[k] ?? "–"}`);
  return parts.length > 0 ? parts.join(" ") : t.displayName || t.id;
}

async function trainingsOf(query: URLSearchParams, signal: AbortSignal): Promise<Training[]> {
  const sweep = query.get("sweep");
  if (sweep) {
    const r = await api.training.listTrainings({ labels: { sweep }, pageSize: MAX_TRAININGS }, { signal });
    return r.trainings.reverse();
  }
  const ids = (query.get("ids") ?? "").split(",").filter(Boolean).slice(0, MAX_TRAININGS);
  return Promise.all(ids.map((id) => api.training.getTraining({ id }, { signal })));
}

export function ComparePage() {
  const { query } = useLocation();
  const key = query.toString();
  const [trainings, setTrainings] = useState<Training[]>();
  const [curves, setCurves] = useState<Map<string, Loaded>>(new Map());
  const [error, setError] = useState<string>();
  const metric = query.get("metric") ?? "loss";

  useEffect(() => {
    const stop = new AbortController();
    const loaded = new Map<string, Loaded>();
    let timer: ReturnType<typeof setTimeout>;
    const round = async () => {
      const list = await trainingsOf(new URLSearchParams(key), stop.signal);
      setTrainings(list);
      // One stream at a time; ended trainings are read once.
      for (const t of list) {
        const had = loaded.get(t.id);
        if (had && ended(t.state) && had.after > 0n) continue;
        loaded.set(t.id, await loadCurves(t.id, had, stop.signal));
        setCurves(new Map(loaded));
      }
      if (list.some((t) => !ended(t.state))) timer = setTimeout(() => round().catch(fail), REFRESH_MS);
    };
    const fail = (err: unknown) => !aborted(err) && setError(failure(err).message);
    round().catch(fail);
    return () => {
      stop.abort();
      clearTimeout(timer);
    };
  }, [key]);

  const pick = (m: string) => {
    const q = new URLSearchParams(query);
    q.set("metric", m);
    setQuery(q);
  };
  const sweep = query.get("sweep");
  const list = trainings ?? [];
  const keys = varying(list);
  const color = (i: number) => PALETTE[i % PALETTE.length];
  const runs = list.map((t) => curves.get(t.id)?.curves).filter((c) => c !== undefined);
  const data = runs.length === list.length && list.length > 0 ? overlaid(runs, metric) : undefined;

  return (
    <main>
      <h1>Compare{sweep ? ` sweep ${sweep}` : ""}</h1>
      {error && <p className="error" role="alert">{error}</p>}
      {trainings === undefined && !error && <p className="muted">Loading…</p>}
      {trainings?.length === 0 && <p className="muted">No trainings to compare. Pick some on <Link href="/trainings">Trainings</Link>, or run <code>cohort train sweep</code>.</p>}
      {list.length > 0 && (
        <>
          <div className="filters">
            <label>
              Metric
              <select value={metric} onChange={(e) => pick(e.target.value)}>
                {METRICS.map((m) => <option key={m}>{m}</option>)}
              </select>
            </label>
            <span className="muted small">{runs.length} of {list.length} trainings' curves loaded</span>
          </div>
          {data && (
            <LineChart
              title={`${metric} by step`}
              xLabel="step"
              log={metric === "loss" || metric === "mse"}
              data={data}
              series={list.map((t, i) => ({ label: short(t, keys), color: color(i) }))}
              height={320}
            />
          )}
          <h2>Frontier</h2>
          <Frontier
            points={list.map((t, i) => ({ id: t.id, label: short(t, keys), l0: t.latestProgress?.l0 ?? NaN, ev: t.latestProgress?.explainedVariance ?? NaN, color: color(i) }))}
          />
          <table className="table" aria-label="compared trainings">
            <thead>
              <tr><th></th><th>training</th>{keys.map((k) => <th key={k}>{k}</th>)}<th>state</th><th>step</th><th>loss</th><th>L0</th><th>explained variance</th><th>dead fraction</th></tr>
            </thead>
            <tbody>
              {list.map((t, i) => {
                const p = t.latestProgress;
                return (
                  <tr key={t.id}>
                    <td><span className="swatch" style={{ background: color(i) }} /></td>
                    <td><Link href={`/trainings/${t.id}`}>{t.displayName || t.id}</Link></td>
                    {keys.map((k) => <td key={k}>{t.labels[k] ?? "–"}</td>)}
                    <td>{stateName(t.state).toLowerCase()}</td>
                    <td>{p ? String(p.step) : "–"}</td>
                    <td>{num(p?.loss)}</td><td>{num(p?.l0)}</td><td>{num(p?.explainedVariance)}</td><td>{num(p?.deadFraction)}</td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </>
      )}
    </main>
  );
}
