// The fleet as one: totals now, and averages over the last hour.
import type { Gpu } from "../gen/cohort/v1/gpu_pb";
import { LineChart } from "../charts/LineChart";
import { bytes, pct } from "../format";
import { useAggregate } from "./useFleet";

export function AggregatedView({ gpus }: { gpus: Gpu[] }) {
  const { now, history: a, error } = useAggregate();
  const agents = new Set(gpus.map((g) => g.agentId)).size;
  return (
    <section aria-label="fleet totals">
      {error && <p className="error" role="alert">{error}</p>}
      <dl className="totals">
        <div><dt>agents</dt><dd>{agents}</dd></div>
        <div><dt>GPUs</dt><dd>{now ? `${now.gpuCount}${now.simulatedCount ? ` (${now.simulatedCount} simulated)` : ""}` : gpus.length}</dd></div>
        <div><dt>busy</dt><dd>{now?.busyCount ?? "–"}</dd></div>
        <div><dt>mean utilization</dt><dd>{pct(now?.meanUtilizationGpuPercent)}</dd></div>
        <div><dt>memory</dt><dd>{now ? `${bytes(now.memoryUsedBytes)} / ${bytes(now.memoryTotalBytes)}` : "–"}</dd></div>
        <div><dt>power</dt><dd>{now ? `${now.powerDrawWatts.toFixed(0)} W` : "–"}</dd></div>
        <div><dt>hottest</dt><dd>{now ? `${now.maxTemperatureCelsius.toFixed(0)} °C` : "–"}</dd></div>
      </dl>
      <div className="grid2">
        <LineChart title="Mean utilization and memory used (%)" time data={[a.t, a.util, a.mem]} series={[{ label: "utilization %", color: "#2f6fdf" }, { label: "memory %", color: "#8a4fd8" }]} />
        <LineChart title="Hottest GPU (°C) and power (W)" time data={[a.t, a.temp, a.power]} series={[{ label: "max temp °C", color: "#d8663a" }, { label: "power W", color: "#3a9d5d", scale: "y2" }]} />
      </div>
    </section>
  );
}
