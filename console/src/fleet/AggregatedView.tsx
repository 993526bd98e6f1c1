// The fleet as one: totals now, and averages over the last hour.
import type { FleetState } from "./useFleet";
import { LineChart } from "../charts/LineChart";
import { bytes, pct } from "../format";
import { availability } from "./GpuCard";

export function AggregatedView({ fleet }: { fleet: FleetState }) {
  const samples = [...fleet.latest.values()];
  const used = samples.reduce((a, s) => a + Number(s.memoryUsedBytes), 0);
  const total = samples.reduce((a, s) => a + Number(s.memoryTotalBytes), 0);
  const util = samples.length ? samples.reduce((a, s) => a + (s.utilizationGpuPercent ?? 0), 0) / samples.length : undefined;
  const power = samples.reduce((a, s) => a + (s.powerDrawWatts ?? 0), 0);
  const busy = fleet.gpus.filter((g) => availability(g) === "busy").length;
  const agents = new Set(fleet.gpus.map((g) => g.agentId)).size;
  const simulated = fleet.gpus.filter((g) => g.info?.simulated).length;
  const a = fleet.aggregate;
  return (
    <section aria-label="fleet totals">
      <dl className="totals">
        <div><dt>agents</dt><dd>{agents}</dd></div>
        <div><dt>GPUs</dt><dd>{fleet.gpus.length}{simulated ? ` (${simulated} simulated)` : ""}</dd></div>
        <div><dt>busy</dt><dd>{busy}</dd></div>
        <div><dt>mean utilization</dt><dd>{pct(util)}</dd></div>
        <div><dt>memory</dt><dd>{bytes(used)} / {bytes(total)}</dd></div>
        <div><dt>power</dt><dd>{power.toFixed(0)} W</dd></div>
      </dl>
      <div className="grid2">
        <LineChart title="Mean utilization and memory used (%)" time data={[a.t, a.util, a.mem]} series={[{ label: "utilization %", color: "#2f6fdf" }, { label: "memory %", color: "#8a4fd8" }]} />
        <LineChart title="Hottest GPU (°C) and power (W)" time data={[a.t, a.temp, a.power]} series={[{ label: "max temp °C", color: "#d8663a" }, { label: "power W", color: "#3a9d5d", scale: "y2" }]} />
      </div>
    </section>
  );
}
