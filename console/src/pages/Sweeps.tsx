// `/sweeps`: the sweeps the caller may see; `/sweeps/ID`: one sweep — its
// searcher, objective and budget, its trials by rung and on the L0 /
// explained-variance frontier, its trials with their params and objective
// values (the best marked), and a link to compare their curves.
import { useEffect, useState } from "react";
import type { JsonValue } from "@bufbuild/protobuf";
import { Searcher, type Sweep, Sweep_State, SweepObjective_Direction } from "../gen/cohort/v1/sweep_pb";
import { aborted, api, failure } from "../api/client";
import { num, stateName, when } from "../format";
import { Link } from "../router";
import { Frontier } from "../compare/Frontier";
import { PALETTE } from "../training/curves";
import { fate, Rungs } from "../sweeps/Rungs";

const POLL_MS = 2000;

function sweepState(s: Sweep_State): string {
  return (Sweep_State[s] ?? String(s)).toLowerCase();
}

function objectiveText(s: Sweep): string {
  const o = s.objective;
  if (!o) return "–";
  if (o.metric === "frontier") return "the L0 / explained-variance frontier";
  const way = o.direction === SweepObjective_Direction.MAXIMIZE ? "maximize" : "minimize";
  return `${way} ${o.metric}`;
}

function value(v: JsonValue | undefined): string {
  if (typeof v === "number" && !Number.isInteger(v)) return Math.abs(v) < 0.01 || Math.abs(v) >= 1e4 ? v.toExponential(3) : num(v, 4);
  return v === undefined ? "–" : String(v);
}

/** Polls `load` every two seconds while the page shows. */
function usePolled<T>(load: (signal: AbortSignal) => Promise<T>, key: string): { data?: T; error?: string } {
  const [data, setData] = useState<T>();
  const [error, setError] = useState<string>();
  useEffect(() => {
    const stop = new AbortController();
    const round = () =>
      load(stop.signal)
        .then((d) => {
          setData(d);
          setError(undefined);
        })
        .catch((err) => !aborted(err) && setError(failure(err).message));
    round();
    const timer = setInterval(round, POLL_MS);
    return () => {
      stop.abort();
      clearInterval(timer);
    };
  }, [key]);
  return { data, error };
}

export function SweepsPage() {
  const { data, error } = usePolled((signal) => api.sweep.listSweeps({ pageSize: 200 }, { signal }).then((r) => r.sweeps), "list");
  return (
    <main>
      <h1>Sweeps</h1>
      {error && <p className="error" role="alert">{error}</p>}
      {data === undefined && !error && <p className="muted">Loading…</p>}
      {data?.length === 0 && <p className="muted">No sweeps yet. Create one with <code>cohort sweep create --config BASE.toml --space SPACE.toml --objective loss</code>.</p>}
      {data && data.length > 0 && (
        <table className="table" aria-label="sweeps">
          <thead>
            <tr><th>sweep</th><th>state</th><th>searcher</th><th>objective</th><th>trials</th><th>created</th></tr>
          </thead>
          <tbody>
            {data.map((s) => (
              <tr key={s.id}>
                <td><Link href={`/sweeps/${s.id}`}>{s.displayName || s.id}</Link></td>
                <td>{sweepState(s.state)}</td>
                <td>{Searcher[s.searcher]?.toLowerCase()}</td>
                <td>{objectiveText(s)}</td>
                <td>at most {s.maxTrials}, {s.maxConcurrent} at once</td>
                <td>{when(s.createTime)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </main>
  );
}

export function SweepPage({ id }: { id: string }) {
  const { data: s, error } = usePolled((signal) => api.sweep.getSweep({ id }, { signal }), id);
  const [cancelling, setCancelling] = useState(false);
  const cancel = () => {
    setCancelling(true);
    api.sweep.cancelSweep({ id, reason: "from the console" }).finally(() => setCancelling(false));
  };
  const keys = [...new Set((s?.trials ?? []).flatMap((t) => Object.keys(t.params ?? {})))].sort();
  const frontier = s?.objective?.metric === "frontier";
  const color = (i: number) => PALETTE[i % PALETTE.length];
  const isBest = (rank: number) => (frontier ? rank >= 0 : rank === 0);
  return (
    <main>
      <h1>Sweep {s?.displayName || id}</h1>
      {error && <p className="error" role="alert">{error}</p>}
      {s === undefined && !error && <p className="muted">Loading…</p>}
      {s && (
        <>
          <dl className="totals" aria-label="sweep">
            <div><dt>state</dt><dd>{sweepState(s.state)}</dd></div>
            <div><dt>searcher</dt><dd>{Searcher[s.searcher]?.toLowerCase()} (seed {String(s.seed)})</dd></div>
            <div><dt>objective</dt><dd>{objectiveText(s)}</dd></div>
            <div><dt>trials</dt><dd>{s.trials.length} of at most {s.maxTrials}, {s.maxConcurrent} at once</dd></div>
            <div><dt>spent</dt><dd>{num(s.gpuHours, 3)} GPU-hours{s.maxGpuHours > 0 ? ` of ${s.maxGpuHours}` : ""}</dd></div>
          </dl>
          <p className="muted small">{s.stateReason}</p>
          <p>
            <Link href={`/compare?sweep=${s.id}`}>Compare the trials' curves and frontier</Link>
            {s.state === Sweep_State.RUNNING && <> · <button onClick={cancel} disabled={cancelling}>Cancel the sweep</button></>}
          </p>
          <div className="grid2">
            <section aria-label="trials by rung">
              <h2>Trials by rung</h2>
              <Rungs sweep={s} colors={color} />
            </section>
            <section aria-label="frontier">
              <h2>Frontier{frontier && s.best.length > 0 ? ` (${s.best.length} trials, hypervolume ${num(s.frontierHypervolume, 4)})` : ""}</h2>
              <Frontier
                points={s.trials
                  .filter((t) => t.l0 !== undefined && t.explainedVariance !== undefined)
                  .map((t) => ({ id: t.trainingId, label: `#${t.index}`, l0: t.l0 ?? NaN, ev: t.explainedVariance ?? NaN, color: color(t.index) }))}
                line={frontier ? s.best : undefined}
              />
            </section>
          </div>
          <table className="table" aria-label="trials">
            <thead>
              <tr><th>#</th><th>training</th>{keys.map((k) => <th key={k}>{k}</th>)}<th>state</th><th>step</th><th>{frontier ? "distance to the frontier" : s.objective?.metric ?? "objective"}</th><th>L0</th><th>explained variance</th></tr>
            </thead>
            <tbody>
              {s.trials.map((t) => {
                const rank = s.best.indexOf(t.trainingId);
                const best = isBest(rank);
                return (
                  <tr key={t.trainingId} aria-label={best ? (frontier ? "on the frontier" : "the best trial") : undefined}>
                    <td style={{ color: color(t.index) }}>{t.index}</td>
                    <td><Link href={`/trainings/${t.trainingId}`}>{t.trainingId}</Link>{best && <strong>{frontier ? " on the frontier" : " best"}</strong>}</td>
                    {keys.map((k) => <td key={k}>{value(t.params?.[k])}</td>)}
                    <td title={t.stateReason}>{fate(t) === "paused" ? "paused" : stateName(t.state).toLowerCase()}</td>
                    <td>{String(t.step)}</td>
                    <td>{t.objective === undefined ? "–" : num(t.objective, 5)}</td>
                    <td>{num(t.l0, 4)}</td>
                    <td>{num(t.explainedVariance, 4)}</td>
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
