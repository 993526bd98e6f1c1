// `/admin`: tokens, quotas and the audit log, for the roles that may see them.
import { useEffect, useState } from "react";
import type { AuditEvent, TeamQuota, Token } from "../gen/cohort/v1/admin_pb";
import { Role } from "../gen/cohort/v1/admin_pb";
import { aborted, api, failure } from "../api/client";
import { canAdmin, useSession } from "../api/session";
import { when } from "../format";

function useCall<T>(call: (signal: AbortSignal) => Promise<T>, deps: unknown[]): { value?: T; error?: string } {
  const [state, setState] = useState<{ value?: T; error?: string }>({});
  useEffect(() => {
    const stop = new AbortController();
    call(stop.signal).then((value) => setState({ value })).catch((err) => !aborted(err) && setState({ error: failure(err).message }));
    return () => stop.abort();
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, deps);
  return state;
}

export function AdminPage() {
  const session = useSession();
  const team = session.team;
  // With auth off there are no tokens to list (and no team to list them for).
  const authOff = session.kind === "anonymous";
  const tokens = useCall<Token[]>(
    (signal) => (authOff ? Promise.resolve([]) : api.admin.listTokens({ team, pageSize: 200 }, { signal }).then((r) => r.tokens)),
    [team, authOff],
  );
  const quotas = useCall<TeamQuota[]>((signal) => api.admin.listQuotas({}, { signal }).then((r) => r.quotas), [team]);
  const audit = useCall<AuditEvent[]>((signal) => api.admin.listAuditEvents({ team, pageSize: 100 }, { signal }).then((r) => r.events), [team]);
  if (!canAdmin(session)) return <main><h1>Admin</h1><p className="muted">Only team admins and cluster admins see this page.</p></main>;
  return (
    <main>
      <h1>Admin</h1>
      <section aria-labelledby="tokens">
        <h2 id="tokens">Tokens{team ? ` of ${team}` : ""}</h2>
        {tokens.error && <p className="error">{tokens.error}</p>}
        {authOff && <p className="muted">Token auth is off on this coordinator (<code>--auth none</code>): there are no tokens.</p>}
        {!authOff && <table className="table">
          <thead><tr><th>team</th><th>name</th><th>role</th><th>creator</th><th>created</th><th>expires</th><th>revoked</th></tr></thead>
          <tbody>
            {(tokens.value ?? []).map((t) => (
              <tr key={t.id}><td>{t.team}</td><td>{t.name}</td><td>{(Role[t.role] ?? "").toLowerCase()}</td><td>{t.creator}</td><td className="small">{when(t.createTime)}</td><td className="small">{when(t.expireTime)}</td><td className="small">{when(t.revokeTime)}</td></tr>
            ))}
          </tbody>
        </table>}
      </section>
      <section aria-labelledby="quotas">
        <h2 id="quotas">Quotas</h2>
        {quotas.error && <p className="error">{quotas.error}</p>}
        {quotas.value?.length === 0 && (
          <p className="muted">
            {authOff
              ? "Token auth is off on this coordinator: trainings belong to no team, and no team has a quota."
              : "No team has a quota, a token, or a training queued or running."}
          </p>
        )}
        {(quotas.value?.length ?? 0) > 0 && <table className="table">
          <thead><tr><th>team</th><th>GPUs in use / guaranteed</th><th>borrow limit</th><th>borrowed</th><th>lent</th><th>weight</th><th>GPU-hours (decayed)</th><th>highest class</th><th>queued / max</th></tr></thead>
          <tbody>
            {(quotas.value ?? []).map((q) => (
              <tr key={q.team}>
                <td>{q.team || <span className="muted">(no team)</span>}</td><td>{q.gpusInUse} / {q.gpus ?? "∞"}</td><td>{q.borrowLimit ?? "none"}</td><td>{q.gpusBorrowed}</td><td>{q.gpusLent}</td>
                <td>{q.weight ?? 1}</td><td>{q.decayedGpuHours.toFixed(1)}</td><td>{q.maxPriorityClass ?? "any"}</td><td>{q.queued} / {q.maxQueued ?? "∞"}</td>
              </tr>
            ))}
          </tbody>
        </table>}
      </section>
      <section aria-labelledby="audit">
        <h2 id="audit">Audit log</h2>
        {audit.error && <p className="error">{audit.error}</p>}
        {audit.value?.length === 0 && <p className="muted">Nothing audited yet.</p>}
        {(audit.value?.length ?? 0) > 0 && <table className="table">
          <thead><tr><th>time</th><th>actor</th><th>method</th><th>target</th><th>outcome</th><th>detail</th></tr></thead>
          <tbody>
            {(audit.value ?? []).map((e) => (
              <tr key={String(e.id)}><td className="small">{when(e.time)}</td><td>{e.actor} ({e.actorTeam || e.actorKind})</td><td className="mono small">{e.method}</td><td>{e.target}</td><td>{e.code}</td><td className="small">{e.detail}</td></tr>
            ))}
          </tbody>
        </table>}
      </section>
    </main>
  );
}
