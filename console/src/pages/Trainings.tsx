// `/trainings`: every training the caller may see, newest first, live.
import { useEffect, useState } from "react";
import type { Training } from "../gen/cohort/v1/training_pb";
import { Training_State } from "../gen/cohort/v1/training_pb";
import { aborted, api, failure } from "../api/client";
import { canEdit, useSession } from "../api/session";
import { num, STATES, stateName, when, estimate } from "../format";
import { Link, setQuery, useLocation } from "../router";
import { gpuCount, loss, progress } from "../training/summary";
import { ProgressBar } from "../training/ProgressBar";

const POLL_MS = 2000;
const PAGE = 200;

export function TrainingsPage() {
  const { query } = useLocation();
  const session = useSession();
  const state = query.get("state") ?? "";
  const team = query.get("team") ?? "";
  const label = query.get("label") ?? "";
  const [picked, setPicked] = useState<Set<string>>(new Set());
  const [teams, setTeams] = useState<string[]>([]);
  const [rows, setRows] = useState<Training[] | undefined>();
  const [error, setError] = useState<string>();

  useEffect(() => {
    const stop = new AbortController();
    const states = state ? [Training_State[state as keyof typeof Training_State]] : [];
    const load = () =>
      api.training
        .listTrainings({ pageSize: PAGE, states, team, labels: parseLabel(label) }, { signal: stop.signal })
        .then((r) => {
          setRows(r.trainings);
          setTeams((known) => [...new Set([...known, ...r.trainings.map((t) => t.team).filter(Boolean)])].sort());
          setError(undefined);
        })
        .catch((err) => !aborted(err) && setError(failure(err).message));
    load();
    const timer = setInterval(load, POLL_MS);
    return () => {
      stop.abort();
      clearInterval(timer);
    };
  }, [state, team, label]);

  const set = (key: string, value: string) => {
    const q = new URLSearchParams(query);
    if (value) q.set(key, value);
    else q.delete(key);
    setQuery(q);
  };
  const shown = rows ?? [];
  const sweep = label.startsWith("sweep=") ? label.slice("sweep=".length) : "";
  const toggle = (id: string, on: boolean) => {
    const next = new Set(picked);
    if (on) next.add(id);
    else next.delete(id);
    setPicked(next);
  };

  return (
    <main>
      <div className="title-row">
        <h1>Trainings</h1>
        {canEdit(session) && <Link className="button primary" href="/new">New training</Link>}
      </div>
      <form className="filters" onSubmit={(e) => e.preventDefault()}>
        <label>
          State
          <select value={state} onChange={(e) => set("state", e.target.value)}>
            <option value="">any</option>
            {STATES.map((s) => (
              <option key={s} value={stateName(s)}>{stateName(s).toLowerCase()}</option>
            ))}
          </select>
        </label>
        <label>
          Team
          <select value={team} onChange={(e) => set("team", e.target.value)}>
            <option value="">any</option>
            {teams.map((t) => <option key={t}>{t}</option>)}
          </select>
        </label>
        <label>
          Label
          <input key={label} placeholder="key=value" defaultValue={label} aria-label="label filter (key=value)"
            onBlur={(e) => set("label", e.target.value.trim())}
            onKeyDown={(e) => e.key === "Enter" && set("label", e.currentTarget.value.trim())} />
        </label>
        {picked.size > 0 && <Link className="button" href={`/compare?ids=${[...picked].join(",")}`}>Compare {picked.size} selected</Link>}
        {sweep && <Link className="button" href={`/compare?sweep=${encodeURIComponent(sweep)}`}>Compare sweep {sweep}</Link>}
      </form>
      {error && <p className="error" role="alert">{error}</p>}
      {rows === undefined && !error && <p className="muted">Loading…</p>}
      {rows !== undefined && shown.length === 0 && <p className="muted">No training matches.</p>}
      {shown.length > 0 && (
        <table className="table">
          <thead>
            <tr><th><span className="visually-hidden">compare</span></th><th>id</th><th>name</th><th>state</th><th>class</th><th>team</th><th>creator</th><th>GPUs</th><th>progress</th><th>loss</th><th>estimate</th><th>created</th></tr>
          </thead>
          <tbody>
            {shown.map((t) => {
              const p = progress(t);
              const name = stateName(t.state);
              return (
                <tr key={t.id}>
                  <td><input type="checkbox" aria-label={`compare ${t.id}`} checked={picked.has(t.id)} onChange={(e) => toggle(t.id, e.target.checked)} /></td>
                  <td><Link href={`/trainings/${t.id}`}>{t.id}</Link></td>
                  <td>{t.displayName || "–"}</td>
                  <td>
                    <span className={`state ${name.toLowerCase()}`}>{name.toLowerCase()}</span>
                    {t.borrowing && <span className="badge" title="runs on idle quota of other teams: it may be reclaimed">borrowing</span>}
                    {t.preemptionCount > 0 && <span className="badge" title="times it was preempted and resumed">preempted {t.preemptionCount}×</span>}
                    {t.state === Training_State.QUEUED && (
                      <div className="muted small">#{t.queuePosition} · {t.stateReason}</div>
                    )}
                  </td>
                  <td>{t.priorityClass || String(t.priority)}</td>
                  <td>{t.team || "–"}</td>
                  <td>{t.creator || "–"}</td>
                  <td>{gpuCount(t) || "–"}</td>
                  <td className="progress-cell">
                    <ProgressBar fraction={p.fraction} label={p.total ? `${p.step} / ${p.total}` : `step ${p.step}`} />
                  </td>
                  <td>{num(loss(t))}</td>
                  <td className="small" title={estimate(t).why}>{estimate(t).text}</td>
                  <td className="small">{when(t.createTime)}</td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
    </main>
  );
}

/** `k=v` → {k: v}; empty or malformed → no label filter. */
export function parseLabel(label: string): Record<string, string> {
  const i = label.indexOf("=");
  if (i <= 0 || i === label.length - 1) return {};
  return { [label.slice(0, i).trim()]: label.slice(i + 1).trim() };
}
