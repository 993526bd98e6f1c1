// One GPU: who holds it, its latest sample, an hour of utilization, memory
// and temperature, and its active alerts.
import type { Gpu } from "../gen/cohort/v1/gpu_pb";
import { GpuAvailability } from "../gen/cohort/v1/gpu_pb";
import type { GpuSample } from "../gen/cohort/v1/common_pb";
import type { Alert } from "../gen/cohort/v1/telemetry_pb";
import { AlertSeverity } from "../gen/cohort/v1/telemetry_pb";
import { Spark } from "../charts/Spark";
import { bytes, pct } from "../format";
import { Link } from "../router";
import type { Points } from "./history";

const AVAILABILITY: Record<number, string> = {
  [GpuAvailability.AVAILABLE]: "available",
  [GpuAvailability.BUSY]: "busy",
  [GpuAvailability.UNHEALTHY]: "unhealthy",
  [GpuAvailability.OFFLINE]: "offline",
  [GpuAvailability.CORDONED]: "cordoned",
  [GpuAvailability.QUARANTINED]: "quarantined",
};

export function availability(g: Gpu): string {
  return AVAILABILITY[g.availability] ?? "unknown";
}

export function GpuCard({ gpu, sample, history, alerts, onRelease }: { gpu: Gpu; sample?: GpuSample; history?: Points; alerts: Alert[]; onRelease?: (uuid: string) => void }) {
  const info = gpu.info;
  const s = sample ?? gpu.latestSample;
  const name = `${gpu.agentName} · GPU ${info?.index ?? "?"}`;
  const state = availability(gpu);
  return (
    <article className={`card gpu ${state}`} aria-label={name} data-gpu={info?.uuid}>
      <header>
        <h3>{name}</h3>
        <span className={`badge ${state}`}>{state}</span>
        {info?.simulated && <span className="badge sim" title="simulated GPU: trains on CPU">simulated</span>}
      </header>
      <p className="muted small">
        {info?.name} · {gpu.hostName}
      </p>
      {gpu.trainingId && (
        <p className="small">
          <Link href={`/trainings/${gpu.trainingId}`}>{gpu.trainingId}</Link> · rank {gpu.rank}
        </p>
      )}
      <dl className="stats">
        <div><dt>util</dt><dd>{pct(s?.utilizationGpuPercent)}</dd></div>
        <div><dt>memory</dt><dd>{bytes(s?.memoryUsedBytes)} / {bytes(s?.memoryTotalBytes ?? info?.memoryTotalBytes)}</dd></div>
        <div><dt>temp</dt><dd>{s?.temperatureCelsius !== undefined ? `${s.temperatureCelsius.toFixed(0)} °C` : "–"}</dd></div>
        <div><dt>power</dt><dd>{s?.powerDrawWatts !== undefined ? `${s.powerDrawWatts.toFixed(0)} W` : "–"}</dd></div>
      </dl>
      {history && history.t.length > 0 && (
        <div className="sparks">
          <span className="muted small">util</span>
          <Spark label={`${name} utilization, last hour`} xs={history.t} ys={history.util} color="#2f6fdf" max={100} />
          <span className="muted small">mem</span>
          <Spark label={`${name} memory used, last hour`} xs={history.t} ys={history.mem} color="#8a4fd8" max={100} />
          <span className="muted small">temp</span>
          <Spark label={`${name} temperature, last hour`} xs={history.t} ys={history.temp} color="#d8663a" />
        </div>
      )}
      {gpu.healthNotes.length > 0 && <p className="warn small">{gpu.healthNotes.join("; ")}</p>}
      {gpu.quarantineReason && onRelease && (
        <button onClick={() => onRelease(info?.uuid ?? "")}>Release from quarantine</button>
      )}
      {alerts.length > 0 && (
        <ul className="alerts" aria-label="alerts">
          {alerts.map((a) => (
            <li key={a.id} className={a.severity === AlertSeverity.CRITICAL ? "critical" : "warning"}>
              {a.kind}: {a.message}
            </li>
          ))}
        </ul>
      )}
    </article>
  );
}
