// How numbers, sizes, times and states read on every page.
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { Training_State, type Training } from "./gen/cohort/v1/training_pb";
import type { CodeSnapshot } from "./gen/cohort/v1/config_pb";

export function bytes(n: bigint | number | undefined): string {
  const v = Number(n ?? 0);
  if (v < 1024) return `${v} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let x = v / 1024;
  let i = 0;
  while (x >= 1024 && i < units.length - 1) {
    x /= 1024;
    i++;
  }
  return `${x.toFixed(x < 10 ? 1 : 0)} ${units[i]}`;
}

export function num(v: number | undefined, digits = 3): string {
  if (v === undefined || v === null) return "–";
  if (Number.isNaN(v)) return "NaN";
  if (!Number.isFinite(v)) return v > 0 ? "∞" : "−∞";
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(2);
  return Number(v.toPrecision(digits)).toString();
}

export function pct(v: number | undefined): string {
  return v === undefined ? "–" : `${v.toFixed(0)}%`;
}

export function date(t: Timestamp | undefined): Date | undefined {
  return t ? timestampDate(t) : undefined;
}

export function when(t: Timestamp | undefined): string {
  const d = date(t);
  return d ? d.toLocaleString() : "–";
}

export function clock(t: Timestamp | undefined): string {
  const d = date(t);
  return d ? d.toLocaleTimeString() : "–";
}

export function duration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return "–";
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}

export const STATES: Training_State[] = [
  Training_State.QUEUED,
  Training_State.SCHEDULED,
  Training_State.RUNNING,
  Training_State.RESTARTING,
  Training_State.SUCCEEDED,
  Training_State.FAILED,
  Training_State.CANCELLED,
];

export function stateName(s: Training_State): string {
  return Training_State[s] ?? "UNKNOWN";
}

export function ended(s: Training_State): boolean {
  return s === Training_State.SUCCEEDED || s === Training_State.FAILED || s === Training_State.CANCELLED;
}

/** How far ahead a time is: `in 12m 5s`, `in 3h 10m`, `in 2d 4h`, `now`. */
export function until(t: Timestamp | undefined, now = Date.now()): string {
  const d = date(t);
  if (!d) return "–";
  const s = (d.getTime() - now) / 1000;
  if (s <= 0) return "now";
  if (s >= 86400) return `in ${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
  return `in ${duration(s)}`;
}

/** When a waiting training starts or a running one ends, from the
 * scheduler's forecast; why not, when nobody can say. */
export function estimate(t: Training, now = Date.now()): { text: string; why?: string } {
  const waiting = t.state === Training_State.QUEUED || t.state === Training_State.RESTARTING;
  const running = t.state === Training_State.SCHEDULED || t.state === Training_State.RUNNING;
  if (waiting && t.estimatedStartTime) return { text: `starts ${until(t.estimatedStartTime, now)}` };
  if (running && t.estimatedEndTime) return { text: `ends ${until(t.estimatedEndTime, now)}` };
  if ((waiting || running) && t.estimateReason) return { text: "no estimate", why: t.estimateReason };
  return { text: "–" };
}

/** A program's code snapshot: `sha256:0123456789ab · 4 files · 1.2 KiB · git 1a2b3c4d5e (dirty)`. */
export function codeText(c: CodeSnapshot): string {
  const git = c.gitCommit ? ` · git ${c.gitCommit.slice(0, 10)}${c.gitDirty ? " (dirty)" : ""}` : "";
  // An upload made by hand may leave the count out.
  const files = c.files === 0n ? "" : ` · ${c.files} file${c.files === 1n ? "" : "s"}`;
  return `sha256:${c.sha256.slice(0, 12)}${files} · ${bytes(c.sizeBytes)}${git}`;
}
