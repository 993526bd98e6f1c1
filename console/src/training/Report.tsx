// The training's report: performance summary, quality, program metrics and
// the scaling table (GetTrainingReport; refreshed while it runs).
import { useEffect, useState } from "react";
import type { TrainingReport } from "../gen/cohort/v1/training_report_pb";
import { aborted, api, failure } from "../api/client";
import { bytes, codeText, duration, num } from "../format";
import { Link } from "../router";

export function Report({ trainingId, refreshKey }: { trainingId: string; refreshKey: number }) {
  const [report, setReport] = useState<TrainingReport>();
  const [error, setError] = useState<string>();
  useEffect(() => {
    const stop = new AbortController();
    api.training
      .getTrainingReport({ id: trainingId, omitMetrics: true }, { signal: stop.signal })
      .then(setReport)
      .catch((err) => !aborted(err) && setError(failure(err).message));
    return () => stop.abort();
  }, [trainingId, refreshKey]);
  if (error) return <p className="error" role="alert">{error}</p>;
  if (!report?.summary) return <p className="muted">Loading the report…</p>;
  const s = report.summary;
  const q = s.quality;
  return (
    <div>
      <p className="muted small">{report.final ? "Final report." : "The training has not ended: this report will change."}</p>
      {report.code && <p className="small" aria-label="report code">Ran code {codeText(report.code)}</p>}
      <dl className="totals">
        <div><dt>ranks</dt><dd>{s.worldSize}</dd></div>
        <div><dt>attempts</dt><dd>{s.attempts}</dd></div>
        <div><dt>steps</dt><dd>{s.stepsUnknown ? "unknown (no progress line)" : `${String(s.steps)} / ${String(s.totalSteps)}`}</dd></div>
        <div><dt>final loss</dt><dd>{num(s.finalLoss)}</dd></div>
        <div><dt>wall time</dt><dd>{duration(s.wallTimeS)}</dd></div>
        <div><dt>samples/s (mean)</dt><dd>{num(s.meanSamplesPerSec)}</dd></div>
        <div><dt>step time p50 / p90 / p99</dt><dd>{num(s.stepTimeP50Ms)} / {num(s.stepTimeP90Ms)} / {num(s.stepTimeP99Ms)} ms</dd></div>
        {q && <div><dt>L0</dt><dd>{num(q.l0)}</dd></div>}
        {q && <div><dt>explained variance</dt><dd>{num(q.explainedVariance)}</dd></div>}
        {q && <div><dt>dead fraction</dt><dd>{num(q.deadFraction)}</dd></div>}
      </dl>
      {s.programMetrics.length > 0 && (
        <table className="table" aria-label="program metrics">
          <thead><tr><th>metric</th><th>first</th><th>last</th><th>min</th><th>max</th><th>points</th></tr></thead>
          <tbody>
            {s.programMetrics.map((m) => (
              <tr key={m.name}><td>{m.name}</td><td>{num(m.first)}</td><td>{num(m.last)}</td><td>{num(m.min)}</td><td>{num(m.max)}</td><td>{String(m.points)}</td></tr>
            ))}
          </tbody>
        </table>
      )}
      {s.ranks.length > 0 && (
        <table className="table" aria-label="rank performance">
          <thead><tr><th>rank</th><th>mean step ms</th><th>compute</th><th>comm</th><th>data wait ms</th><th>peak memory</th><th>GPU util mean / max</th></tr></thead>
          <tbody>
            {s.ranks.map((r) => (
              <tr key={r.rank}>
                <td>{r.rank}</td><td>{num(r.meanStepTimeMs)}</td>
                <td>{r.computeShare !== undefined ? `${(r.computeShare * 100).toFixed(0)}%` : "–"}</td>
                <td>{r.commShare !== undefined ? `${(r.commShare * 100).toFixed(0)}%` : "–"}</td>
                <td>{num(r.meanDataWaitMs)}</td><td>{bytes(r.peakMemoryBytes)}</td>
                <td>{num(r.gpuUtilizationMeanPercent)}% / {num(r.gpuUtilizationMaxPercent)}%</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {report.cost && (
        <>
          <h3 id="cost">Cost</h3>
          <dl className="totals" aria-label="cost">
            <div><dt>GPU-hours</dt><dd>{report.cost.gpuHours.toFixed(3)}</dd></div>
            <div><dt>idle GPU-hours</dt><dd>{report.cost.idleUnknown ? (report.cost.attempts.every((a) => a.idleUnknown) ? "unknown (no progress line)" : `${report.cost.idleGpuHours.toFixed(3)}, more unknown`) : report.cost.idleGpuHours.toFixed(3)}</dd></div>
            <div><dt>attempts</dt><dd>{report.cost.attempts.length}</dd></div>
            <div><dt>GPU</dt><dd>{report.cost.gpuModel || "–"}</dd></div>
            <div><dt>price</dt><dd>{report.cost.price ? `$${report.cost.price.usdPerGpuHour.toFixed(2)}/GPU-hour (${report.cost.price.pattern})` : "no --gpu-price matches"}</dd></div>
            <div><dt>cost</dt><dd>{report.cost.costUsd !== undefined ? `$${report.cost.costUsd.toFixed(2)}` : "–"}</dd></div>
            <div><dt>per million samples</dt><dd>{report.cost.costPerMillionSamplesUsd !== undefined ? `$${report.cost.costPerMillionSamplesUsd.toFixed(4)}` : "–"}</dd></div>
          </dl>
        </>
      )}
      <h3>Scaling</h3>
      {report.scaling?.note && <p className="muted small">{report.scaling.note}</p>}
      {report.scaling && report.scaling.rows.length > 0 && (
        <table className="table" aria-label="scaling">
          <thead><tr><th>training</th><th>GPUs</th><th>samples/s</th><th>speed-up</th><th>efficiency</th></tr></thead>
          <tbody>
            {report.scaling.rows.map((r) => (
              <tr key={r.trainingId} className={r.current ? "current" : ""}>
                <td><Link href={`/trainings/${r.trainingId}`}>{r.trainingId}</Link></td><td>{r.worldSize}</td>
                <td>{num(r.samplesPerSec)}</td><td>{r.speedup !== undefined ? `${num(r.speedup)}×` : "–"}</td>
                <td>{r.efficiency !== undefined ? `${(r.efficiency * 100).toFixed(0)}%` : "–"}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {report.scaling && report.scaling.estimates.length > 0 && (
        <>
          <p className="muted small">Estimated from this run's own compute and communication per step (compute stays, the all-reduce grows as a ring's 2(M-1)/M):</p>
          <table className="table" aria-label="scaling estimate">
            <thead><tr><th>GPUs</th><th>step ms</th><th>speed-up</th><th>efficiency</th></tr></thead>
            <tbody>
              {report.scaling.estimates.map((e) => (
                <tr key={e.worldSize}><td>{e.worldSize}</td><td>{num(e.stepTimeMs)}</td><td>{num(e.speedup)}×</td><td>{(e.efficiency * 100).toFixed(0)}%</td></tr>
              ))}
            </tbody>
          </table>
        </>
      )}
    </div>
  );
}
