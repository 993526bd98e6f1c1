// Transitions and notable events, newest first.
import type { TrainingEvent } from "../gen/cohort/v1/training_events_pb";
import { clock, num, stateName } from "../format";

export function describe(ev: TrainingEvent): string {
  const e = ev.event;
  switch (e.case) {
    case "stateChange":
      if (e.value.from === 0) return `${stateName(e.value.to).toLowerCase()}${e.value.reason ? `: ${e.value.reason}` : ""}`;
      return `${stateName(e.value.from).toLowerCase()} → ${stateName(e.value.to).toLowerCase()}${e.value.reason ? `: ${e.value.reason}` : ""}`;
    case "started":
      return `started: ${e.value.worldSize} ranks on ${e.value.device}, ${e.value.totalSteps} steps from ${e.value.startStep}, global batch ${e.value.globalBatch}`;
    case "checkpoint":
      return `checkpoint at step ${e.value.step}${e.value.best ? " (best)" : ""}`;
    case "finished":
      return `finished at step ${e.value.step}, loss ${num(e.value.loss)}, ${num(e.value.meanSamplesPerSec)} samples/s`;
    case "rankFinished":
      return `rank ${e.value.rank} finished at step ${e.value.step}`;
    case "straggler":
      return `rank ${e.value.rank} ${e.value.straggling ? "straggles" : "caught up"}: ${num(e.value.computeMs)} ms compute vs median ${num(e.value.medianComputeMs)} ms`;
    case "validation":
      return `validation at step ${e.value.step}: loss ${num(e.value.loss)}, L0 ${num(e.value.l0)}, explained variance ${num(e.value.explainedVariance)}${e.value.best ? " (best)" : ""}`;
    case "diverged":
      return `diverged at step ${e.value.step}: ${e.value.nonfiniteSteps} non-finite steps`;
    case "checkpointRejected":
      return `checkpoint at step ${e.value.step} rejected: ${e.value.reason}`;
    case "collectiveError":
      return `rank ${e.value.rank}: collective error at step ${e.value.step}: ${e.value.message}`;
    case "preempted": {
      const p = e.value;
      const what = p.kind === "reclaim" ? `reclaimed for ${p.by}` : p.kind === "drain" ? `moved off drained agent ${p.by}` : `preempted by ${p.by}${p.priorityClass ? ` (class ${p.priorityClass})` : ""}`;
      return `${what}: resumes from ${p.resumeStep !== undefined ? `step ${p.resumeStep}` : "the start"}, ${num(p.gpuSecondsLost)} GPU-seconds lost${p.checkpointed ? ", checkpointed on notice" : ""}`;
    }
    case "resized":
      return `resized: ${e.value.fromWorldSize} → ${e.value.toWorldSize} ranks ${e.value.step !== undefined ? `at step ${e.value.step}` : "from the start"}, ${num(e.value.seconds)} s (${e.value.reason})`;
    case "estimate":
      if (e.value.estimatedStartTime) return `estimate: starts ${clock(e.value.estimatedStartTime)}`;
      if (e.value.estimatedEndTime) return `estimate: ends ${clock(e.value.estimatedEndTime)}`;
      return `estimate: none (${e.value.reason})`;
    default:
      return e.case ?? "event";
  }
}

export function Events({ events }: { events: TrainingEvent[] }) {
  if (events.length === 0) return <p className="muted">No events yet.</p>;
  return (
    <ul className="events" aria-label="events">
      {[...events].reverse().map((ev) => (
        <li key={String(ev.sequence)}>
          <time className="muted small">{clock(ev.time)}</time> <span className="muted small">attempt {ev.attempt}</span> {describe(ev)}
        </li>
      ))}
    </ul>
  );
}
