// The fleet's hosts: every agent with its state (cordoned, draining), GPUs
// and its last host doctor verdict; a cluster-admin runs the doctor from
// here and reads each check (pass / fail / skip, the measured value, the
// reason), and cordons, drains or uncordons a host.
import { useCallback, useEffect, useState } from "react";
import { api, failure } from "../api/client";
import { canClusterAdmin, useSession } from "../api/session";
import { AgentState, type Agent } from "../gen/cohort/v1/agent_pb";
import { DoctorStatus, type DoctorReport } from "../gen/cohort/v1/agent_maintenance_pb";
import { when } from "../format";

/** Rows shown at once: the hosts not ready first. */
const SHOWN = 50;
const REFRESH_MS = 15_000;

export function verdict(r: DoctorReport | undefined): { text: string; tone: "ok" | "bad" | "none" } {
  if (!r) return { text: "never checked", tone: "none" };
  if (r.ok) return { text: "healthy", tone: "ok" };
  const failed = r.checks.filter((c) => c.status === DoctorStatus.FAIL).map((c) => c.name);
  return { text: `failed: ${failed.join(", ")}`, tone: "bad" };
}

const STATUS: Record<DoctorStatus, string> = {
  [DoctorStatus.UNSPECIFIED]: "?",
  [DoctorStatus.PASS]: "pass",
  [DoctorStatus.FAIL]: "fail",
  [DoctorStatus.SKIP]: "skip",
};

export function DoctorChecks({ report }: { report: DoctorReport }) {
  const seconds = Number(report.duration?.seconds ?? 0n) + (report.duration?.nanos ?? 0) / 1e9;
  return (
    <div className="doctor" aria-label={`doctor report of ${report.agent}`}>
      <p className="small muted">
        {report.agent}: {report.ok ? "healthy" : "not ready"} · ran {seconds.toFixed(1)} s · {when(report.finishTime)}
      </p>
      <table className="table">
        <thead>
          <tr><th>Check</th><th>Status</th><th>Value</th><th>Why</th></tr>
        </thead>
        <tbody>
          {report.checks.map((c) => (
            <tr key={c.name} className={c.status === DoctorStatus.FAIL ? "critical" : ""}>
              <td><code>{c.name}</code></td>
              <td><span className={`badge doctor-${STATUS[c.status]}`}>{STATUS[c.status]}</span></td>
              <td>{c.value}</td>
              <td className="small">{c.detail}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

/** An agent's state as a person reads it. */
export function hostState(a: Agent): string {
  const base = a.state === AgentState.CONNECTED ? "connected" : "disconnected";
  if (a.draining) return `${base}, draining (${a.placedRanks} ranks left)`;
  if (a.cordonReason) return `${base}, cordoned: ${a.cordonReason}`;
  return base;
}

type Pending = { name: string; kind: "cordon" | "drain"; reason: string; minutes: number };

export function Hosts({ needle, onChange }: { needle: string; onChange?: () => void }) {
  const session = useSession();
  const [agents, setAgents] = useState<Agent[]>([]);
  const [error, setError] = useState<string>();
  const [open, setOpen] = useState<string>();
  const [running, setRunning] = useState<string>();
  const [pending, setPending] = useState<Pending>();
  const load = useCallback(async () => {
    try {
      const all: Agent[] = [];
      let pageToken = "";
      do {
        const page = await api.agent.listAgents({ pageToken });
        all.push(...page.agents);
        pageToken = page.nextPageToken;
      } while (pageToken);
      setAgents(all);
      setError(undefined);
    } catch (e) {
      setError(failure(e).message);
    }
  }, []);
  useEffect(() => {
    void load();
    const timer = setInterval(() => void load(), REFRESH_MS);
    return () => clearInterval(timer);
  }, [load]);
  const run = async (name: string) => {
    setRunning(name);
    setError(undefined);
    try {
      await api.agent.runDoctor({ agent: name });
      setOpen(name);
      await load();
    } catch (e) {
      setError(`doctor on ${name}: ${failure(e).message}`);
    } finally {
      setRunning(undefined);
    }
  };
  const maintain = async (name: string, call: () => Promise<unknown>) => {
    setError(undefined);
    try {
      await call();
      setPending(undefined);
      await load();
      onChange?.();
    } catch (e) {
      setError(`${name}: ${failure(e).message}`);
    }
  };
  const confirm = (p: Pending) =>
    maintain(p.name, () =>
      p.kind === "cordon"
        ? api.agent.cordonAgent({ agent: p.name, reason: p.reason })
        : api.agent.drainAgent({ agent: p.name, reason: p.reason, deadline: { seconds: BigInt(p.minutes * 60), nanos: 0 } }),
    );
  const matching = needle
    ? agents.filter((a) => `${a.name} ${a.hostName}`.toLowerCase().includes(needle))
    : agents;
  const notReady = matching.filter((a) => a.lastDoctor && !a.lastDoctor.ok);
  const ordered = [...notReady, ...matching.filter((a) => !(a.lastDoctor && !a.lastDoctor.ok))].slice(0, SHOWN);
  const admin = canClusterAdmin(session);
  return (
    <details className="hosts" open={agents.length <= 20}>
      <summary>
        Hosts ({agents.length}){notReady.length > 0 && <span className="bad"> · {notReady.length} not ready</span>}
      </summary>
      {error && <p className="error" role="alert">{error}</p>}
      <table className="table" aria-label="hosts">
        <thead>
          <tr><th>Agent</th><th>Host</th><th>State</th><th>GPUs</th><th>Doctor</th><th /></tr>
        </thead>
        <tbody>
          {ordered.map((a) => {
            const v = verdict(a.lastDoctor);
            const connected = a.state === AgentState.CONNECTED;
            return [
              <tr key={a.id}>
                <td>{a.name}</td>
                <td>{a.hostName}</td>
                <td className={a.cordonReason ? "warn" : ""}>{hostState(a)}</td>
                <td>{a.gpus.length}{a.gpus.some((g) => g.simulated) ? " (simulated)" : ""}</td>
                <td>
                  <span className={`doctor-verdict ${v.tone}`}>{v.text}</span>
                  {a.lastDoctor && <span className="small muted"> · {when(a.lastDoctor.finishTime)}</span>}
                </td>
                <td>
                  {a.lastDoctor && (
                    <button onClick={() => setOpen(open === a.name ? undefined : a.name)} aria-expanded={open === a.name}>
                      {open === a.name ? "Hide" : "Checks"}
                    </button>
                  )}
                  {admin && connected && (
                    <button disabled={running !== undefined} onClick={() => void run(a.name)}>
                      {running === a.name ? "Running…" : "Run doctor"}
                    </button>
                  )}
                  {admin && !a.cordonReason && (
                    <>
                      <button onClick={() => setPending({ name: a.name, kind: "cordon", reason: "", minutes: 10 })}>Cordon…</button>
                      <button onClick={() => setPending({ name: a.name, kind: "drain", reason: "", minutes: 10 })}>Drain…</button>
                    </>
                  )}
                  {admin && a.cordonReason && (
                    <button onClick={() => void maintain(a.name, () => api.agent.uncordonAgent({ agent: a.name }))}>Uncordon</button>
                  )}
                </td>
              </tr>,
              pending?.name === a.name ? (
                <tr key={`${a.id}-pending`}>
                  <td colSpan={6}>
                    <form
                      className="inline-form"
                      aria-label={`${pending.kind} ${a.name}`}
                      onSubmit={(e) => {
                        e.preventDefault();
                        void confirm(pending);
                      }}
                    >
                      <label>
                        Reason
                        <input value={pending.reason} maxLength={256} placeholder="maintenance" onChange={(e) => setPending({ ...pending, reason: e.target.value })} />
                      </label>
                      {pending.kind === "drain" && (
                        <label>
                          Deadline (minutes)
                          <input type="number" min={1} max={10080} value={pending.minutes} onChange={(e) => setPending({ ...pending, minutes: Math.max(1, Number(e.target.value) || 1) })} />
                        </label>
                      )}
                      <button type="submit" className="danger">{pending.kind === "cordon" ? "Cordon" : "Drain"} {a.name}</button>
                      <button type="button" onClick={() => setPending(undefined)}>Cancel</button>
                      <span className="small muted">
                        {pending.kind === "cordon"
                          ? "No new placements; what runs there keeps running."
                          : "Each training moves elsewhere at its next checkpoint (no restart budget spent); at the deadline the rest move at once."}
                      </span>
                    </form>
                  </td>
                </tr>
              ) : null,
              open === a.name && a.lastDoctor ? (
                <tr key={`${a.id}-report`}>
                  <td colSpan={6}><DoctorChecks report={a.lastDoctor} /></td>
                </tr>
              ) : null,
            ];
          })}
        </tbody>
      </table>
      {matching.length > SHOWN && <p className="small muted">Showing {SHOWN} of {matching.length} hosts (those not ready first); search narrows them.</p>}
    </details>
  );
}
