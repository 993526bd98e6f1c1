// `/trainings/<id>`: one training, live.
import { useState } from "react";
import { aborted, api, failure } from "../api/client";
import { canEdit, useSession } from "../api/session";
import { codeText, duration, ended, estimate, num, stateName, when } from "../format";
import { Link } from "../router";
import { Checkpoints } from "../training/Checkpoints";
import { Curves } from "../training/Curves";
import { Events } from "../training/Events";
import { Logs } from "../training/Logs";
import { ProgressBar } from "../training/ProgressBar";
import { Ranks } from "../training/Ranks";
import { Sizes } from "../training/Sizes";
import { Report } from "../training/Report";
import { gpuCount, isProgram, loss, progress } from "../training/summary";
import { secondsLeft, useTraining } from "../training/useTraining";

export function TrainingPage({ id }: { id: string }) {
  const view = useTraining(id);
  const session = useSession();
  const [cancelError, setCancelError] = useState<string>();
  const t = view.training;
  if (view.notFound) return <main><h1>Training {id}</h1><p className="error" role="alert">No such training (or not one your team may see). <Link href="/trainings">All trainings</Link></p></main>;
  if (!t) return <main><h1>Training {id}</h1>{view.error ? <p className="error" role="alert">{view.error}</p> : <p className="muted">Loading…</p>}</main>;
  const p = progress(t);
  const state = stateName(t.state).toLowerCase();
  const program = isProgram(t);
  // Checkpoints and the report are read again when the training moves on.
  const refreshKey = Number(p.step / 50n) + t.state * 1e9;
  const cancel = async () => {
    if (!window.confirm(`Cancel training ${t.id}? Its ranks are stopped.`)) return;
    try {
      await api.training.cancelTraining({ id: t.id, reason: `cancelled from the console by ${session.name || "a user"}` });
    } catch (err) {
      if (!aborted(err)) setCancelError(failure(err).message);
    }
  };
  return (
    <main>
      <div className="title-row">
        <h1>{t.displayName || t.id}</h1>
        <span className={`state ${state}`}>{state}</span>
        {t.borrowing && <span className="badge" title="runs on idle quota of other teams: it may be reclaimed">borrowing</span>}
        {canEdit(session) && !ended(t.state) && <button className="danger" onClick={cancel}>Cancel training</button>}
      </div>
      {cancelError && <p className="error" role="alert">{cancelError}</p>}
      <p className="muted small">
        {t.id} · team {t.team || "–"} · by {t.creator || "–"} · {gpuCount(t)} GPUs · attempt {t.attempt} ({t.restartCount}/{t.maxRestarts} restarts) · created {when(t.createTime)}
      </p>
      <p className="muted small" aria-label="scheduling">
        class {t.priorityClass || "none"} (priority {t.priority}) · preempted {t.preemptionCount}×{t.resizeCount > 0 ? ` · resized ${t.resizeCount}×` : ""} · {t.borrow ? "may borrow idle quota" : "never borrows"}
        {(() => {
          const e = estimate(t);
          return e.text === "–" ? null : <> · <span title={e.why}>{e.text}{e.why ? ` (${e.why})` : ""}</span></>;
        })()}
      </p>
      {t.config?.program?.code && (
        <p className="muted small" aria-label="code" title={`sha256:${t.config.program.code.sha256}`}>
          code {codeText(t.config.program.code)}
        </p>
      )}
      {Object.keys(t.labels).length > 0 && (
        <div className="labels" aria-label="labels">
          {Object.entries(t.labels).sort().map(([k, v]) => (
            <Link key={k} className="label" href={`/trainings?label=${encodeURIComponent(`${k}=${v}`)}`}>{k}={v}</Link>
          ))}
          {t.labels.sweep && <Link href={`/compare?sweep=${encodeURIComponent(t.labels.sweep)}`}>Compare the sweep</Link>}
        </div>
      )}
      {t.stateReason && <p className="small">{t.stateReason}</p>}
      {(() => {
        const left = p.total && !ended(t.state) ? secondsLeft(view.recent, Number(p.total)) : undefined;
        // A program that has printed no progress line: its step is not known, not 0.
        const silent = program && !t.latestProgramProgress && !t.latestProgress;
        const label = silent
          ? `no progress line${ended(t.state) ? "" : " yet"}`
          : `${p.total ? `step ${p.step} / ${p.total}` : `step ${p.step}`}${left !== undefined ? ` · ETA ${duration(left)}` : ""}`;
        return <ProgressBar fraction={p.fraction} label={label} />;
      })()}
      <p className="small">loss {num(loss(t))}{t.globalBatchSize > 0n ? ` · global batch ${t.globalBatchSize}` : ""}</p>
      {t.gpuRequest?.minCount !== undefined && (
        <section aria-labelledby="size"><h2 id="size">Size</h2><Sizes events={view.events} min={t.gpuRequest.minCount} max={t.gpuRequest.maxCount ?? t.gpuRequest.minCount} now={ended(t.state) && t.endTime ? Number(t.endTime.seconds) * 1000 : Date.now()} /></section>
      )}
      <section aria-labelledby="curves"><h2 id="curves">Curves</h2><Curves view={view} program={program} /></section>
      <section aria-labelledby="ranks"><h2 id="ranks">Ranks</h2><Ranks training={t} stats={view.ranks} /></section>
      <section aria-labelledby="logs"><h2 id="logs">Logs</h2><Logs trainingId={t.id} attempt={t.attempt} live={!ended(t.state)} /></section>
      <section aria-labelledby="checkpoints"><h2 id="checkpoints">Checkpoints</h2><Checkpoints trainingId={t.id} program={program} refreshKey={refreshKey} /></section>
      <section aria-labelledby="events"><h2 id="events">Events</h2><Events events={view.events} /></section>
      <section aria-labelledby="report"><h2 id="report">Report</h2><Report trainingId={t.id} refreshKey={refreshKey} /></section>
    </main>
  );
}
