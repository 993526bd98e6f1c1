// `/`: every agent and GPU, per-GPU cards or the fleet aggregated.
import { useFleet } from "../fleet/useFleet";
import { useAlerts } from "../fleet/useAlerts";
import { GpuCard } from "../fleet/GpuCard";
import { AggregatedView } from "../fleet/AggregatedView";
import { setQuery, useLocation } from "../router";
import type { Alert } from "../gen/cohort/v1/telemetry_pb";

export function FleetPage() {
  const fleet = useFleet();
  const alerts = useAlerts();
  const { query } = useLocation();
  const view = query.get("view") === "aggregated" ? "aggregated" : "per-gpu";
  const choose = (v: string) => {
    const q = new URLSearchParams(query);
    if (v === "aggregated") q.set("view", v);
    else q.delete("view");
    setQuery(q);
  };
  const byGpu = new Map<string, Alert[]>();
  for (const a of alerts.active) if (a.gpuUuid) byGpu.set(a.gpuUuid, [...(byGpu.get(a.gpuUuid) ?? []), a]);
  return (
    <main>
      <div className="title-row">
        <h1>Fleet</h1>
        <div className="toggle" role="radiogroup" aria-label="view">
          {[["per-gpu", "Per GPU"], ["aggregated", "Aggregated"]].map(([v, label]) => (
            <button key={v} role="radio" aria-checked={view === v} className={view === v ? "on" : ""} onClick={() => choose(v)}>
              {label}
            </button>
          ))}
        </div>
      </div>
      {fleet.error && <p className="error" role="alert">{fleet.error}</p>}
      {!fleet.loaded && !fleet.error && <p className="muted">Loading the fleet…</p>}
      {fleet.loaded && fleet.gpus.length === 0 && <p className="muted">No agent has registered yet. Start one: <code>cohort-agent --coordinator http://HOST:50051</code></p>}
      {view === "aggregated" ? (
        <AggregatedView fleet={fleet} />
      ) : (
        <section className="cards" aria-label="GPUs">
          {fleet.gpus.map((g) => {
            const uuid = g.info?.uuid ?? "";
            return <GpuCard key={uuid} gpu={g} sample={fleet.latest.get(uuid)} history={fleet.history.get(uuid)} alerts={byGpu.get(uuid) ?? []} />;
          })}
        </section>
      )}
    </main>
  );
}
