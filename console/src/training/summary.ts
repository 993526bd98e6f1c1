// What a training's row shows: progress fraction, loss, GPU count.
import type { Training } from "../gen/cohort/v1/training_pb";

export function progress(t: Training): { step: bigint; total?: bigint; fraction?: number } {
  const p = t.latestProgress;
  const q = t.latestProgramProgress;
  if (q && (!p || q.step >= p.step)) {
    const total = q.totalSteps;
    return { step: q.step, total, fraction: total ? Number(q.step) / Number(total) : undefined };
  }
  if (p) {
    const total = p.totalSteps > 0n ? p.totalSteps : undefined;
    return { step: p.step, total, fraction: total ? Number(p.step) / Number(total) : undefined };
  }
  return { step: 0n };
}

export function loss(t: Training): number | undefined {
  if (t.latestProgramProgress && t.latestProgramProgress.loss !== undefined) return t.latestProgramProgress.loss;
  return t.latestProgress ? t.latestProgress.loss : undefined;
}

export function gpuCount(t: Training): number {
  if (t.worldSize > 0) return t.worldSize;
  const sel = t.gpuRequest?.selection;
  if (sel?.case === "gpuIds") return sel.value.ids.length;
  if (sel?.case === "count") return sel.value;
  // An elastic training not yet placed: at least its smallest size.
  if (t.gpuRequest?.minCount !== undefined) return t.gpuRequest.minCount;
  return 0;
}

export function isProgram(t: Training): boolean {
  return !!t.config?.program;
}
