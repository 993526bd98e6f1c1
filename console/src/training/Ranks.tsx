// Each rank: where it runs, its state and its latest step timings.
import type { Training } from "../gen/cohort/v1/training_pb";
import { RankState } from "../gen/cohort/v1/training_pb";
import type { RankStats } from "../gen/cohort/v1/training_events_pb";
import { bytes, num } from "../format";

export function Ranks({ training, stats }: { training: Training; stats: Map<number, RankStats> }) {
  if (training.ranks.length === 0) return <p className="muted">No ranks placed yet.</p>;
  const stragglers = new Set(training.stragglerRanks);
  return (
    <table className="table" aria-label="ranks">
      <thead>
        <tr><th>rank</th><th>host · GPU</th><th>state</th><th>step</th><th>step ms</th><th>compute ms</th><th>comm ms</th><th>data wait ms</th><th>memory</th></tr>
      </thead>
      <tbody>
        {training.ranks.map((r) => {
          const s = stats.get(r.rank);
          return (
            <tr key={r.rank} className={stragglers.has(r.rank) ? "straggler" : ""}>
              <td>{r.rank}{stragglers.has(r.rank) && <span className="badge warn" title="slower than the others">straggler</span>}</td>
              <td>{r.hostName} · {r.gpuIndex}</td>
              <td>{(RankState[r.state] ?? "").replace("RANK_STATE_", "").toLowerCase()}{r.exitCode !== undefined ? ` (exit ${r.exitCode})` : ""}</td>
              <td>{s ? String(s.step) : "–"}</td>
              <td>{num(s?.stepTimeMs)}</td>
              <td>{num(s?.computeMs)}</td>
              <td>{num(s?.commMs)}</td>
              <td>{num(s?.dataWaitMs)}</td>
              <td>{s ? bytes(s.memoryBytes) : "–"}</td>
            </tr>
          );
        })}
      </tbody>
    </table>
  );
}
