// `/alerts`: active alerts and those resolved in the last day, live.
import { AlertSeverity, type Alert } from "../gen/cohort/v1/telemetry_pb";
import { useAlerts } from "../fleet/useAlerts";
import { num, when } from "../format";
import { Link } from "../router";

function Rows({ alerts }: { alerts: Alert[] }) {
  return (
    <table className="table">
      <thead><tr><th>severity</th><th>kind</th><th>message</th><th>value / threshold</th><th>training</th><th>raised</th><th>resolved</th></tr></thead>
      <tbody>
        {alerts.map((a) => (
          <tr key={a.id} className={a.severity === AlertSeverity.CRITICAL ? "critical" : ""}>
            <td>{(AlertSeverity[a.severity] ?? "").toLowerCase()}</td>
            <td>{a.kind}</td>
            <td>{a.message}</td>
            <td>{num(a.value)} / {num(a.threshold)}</td>
            <td>{a.trainingId ? <Link href={`/trainings/${a.trainingId}`}>{a.trainingId}</Link> : "–"}</td>
            <td className="small">{when(a.raiseTime)}</td>
            <td className="small">{when(a.resolveTime)}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

export function AlertsPage() {
  const alerts = useAlerts(24 * 3600);
  return (
    <main>
      <h1>Alerts</h1>
      {alerts.error && <p className="error" role="alert">{alerts.error}</p>}
      <h2>Active ({alerts.active.length})</h2>
      {alerts.caughtUp && alerts.active.length === 0 ? <p className="muted">Nothing is wrong right now.</p> : <Rows alerts={alerts.active} />}
      <h2>Resolved in the last 24 hours</h2>
      {alerts.resolved.length === 0 ? <p className="muted">None.</p> : <Rows alerts={alerts.resolved} />}
    </main>
  );
}
