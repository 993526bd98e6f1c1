// `/`: every agent and GPU, per-GPU cards (a page at a time, searchable) or
// the fleet aggregated.
import { useState } from "react";
import { useGpuCards, useGpuList } from "../fleet/useFleet";
import { useAlerts } from "../fleet/useAlerts";
import { GpuCard } from "../fleet/GpuCard";
import { AggregatedView } from "../fleet/AggregatedView";
import { Hosts } from "../fleet/Hosts";
import { setQuery, useLocation } from "../router";
import { api, failure } from "../api/client";
import { canClusterAdmin, useSession } from "../api/session";
import type { Alert } from "../gen/cohort/v1/telemetry_pb";

const PER_PAGE = 48;

export function FleetPage() {
  const list = useGpuList();
  const session = useSession();
  const [released, setReleased] = useState<string>();
  const release = async (uuid: string) => {
    try {
      await api.gpu.releaseGpu({ gpuUuid: uuid });
      setReleased(undefined);
      list.reload();
    } catch (e) {
      setReleased(`release of ${uuid}: ${failure(e).message}`);
    }
  };
  const alerts = useAlerts();
  const { query } = useLocation();
  const [search, setSearch] = useState("");
  const view = query.get("view") === "aggregated" ? "aggregated" : "per-gpu";
  const page = Math.max(0, Number(query.get("page") ?? 0) || 0);
  const set = (key: string, value: string) => {
    const q = new URLSearchParams(query);
    if (value) q.set(key, value);
    else q.delete(key);
    setQuery(q);
  };
  const needle = search.trim().toLowerCase();
  const matching = needle
    ? list.gpus.filter((g) => `${g.agentName} ${g.hostName} ${g.info?.name} ${g.trainingId}`.toLowerCase().includes(needle))
    : list.gpus;
  const pages = Math.max(1, Math.ceil(matching.length / PER_PAGE));
  const shown = matching.slice(Math.min(page, pages - 1) * PER_PAGE, Math.min(page, pages - 1) * PER_PAGE + PER_PAGE);
  const cards = useGpuCards(view === "per-gpu" ? shown.map((g) => g.info?.uuid ?? "") : []);
  const byGpu = new Map<string, Alert[]>();
  for (const a of alerts.active) if (a.gpuUuid) byGpu.set(a.gpuUuid, [...(byGpu.get(a.gpuUuid) ?? []), a]);
  const error = list.error ?? cards.error ?? released;
  return (
    <main>
      <div className="title-row">
        <h1>Fleet</h1>
        <div className="toggle" role="radiogroup" aria-label="view">
          {[["per-gpu", "Per GPU"], ["aggregated", "Aggregated"]].map(([v, label]) => (
            <button key={v} role="radio" aria-checked={view === v} className={view === v ? "on" : ""} onClick={() => set("view", v === "aggregated" ? v : "")}>
              {label}
            </button>
          ))}
        </div>
      </div>
      {error && <p className="error" role="alert">{error}</p>}
      {!list.loaded && !error && <p className="muted">Loading the fleet…</p>}
      {list.loaded && list.gpus.length === 0 && <p className="muted">No agent has registered yet. Start one: <code>cohort-agent --coordinator http://HOST:50051</code></p>}
      {list.loaded && list.gpus.length > 0 && <Hosts needle={needle} onChange={list.reload} />}
      {view === "aggregated" ? (
        <AggregatedView gpus={list.gpus} />
      ) : (
        <>
          {list.gpus.length > PER_PAGE && (
            <div className="filters">
              <label>
                Find
                <input type="search" placeholder="agent, host, model, training" value={search} onChange={(e) => { setSearch(e.target.value); set("page", ""); }} />
              </label>
              <span className="small muted">{matching.length} GPUs · page {Math.min(page, pages - 1) + 1} of {pages}</span>
              <button disabled={page <= 0} onClick={() => set("page", page > 1 ? String(page - 1) : "")}>Previous</button>
              <button disabled={page >= pages - 1} onClick={() => set("page", String(page + 1))}>Next</button>
            </div>
          )}
          <section className="cards" aria-label="GPUs">
            {shown.map((g) => {
              const uuid = g.info?.uuid ?? "";
              return <GpuCard key={uuid} gpu={g} sample={cards.latest.get(uuid)} history={cards.history.get(uuid)} alerts={byGpu.get(uuid) ?? []} onRelease={canClusterAdmin(session) ? (u) => void release(u) : undefined} />;
            })}
          </section>
        </>
      )}
    </main>
  );
}
