// The ranks' log lines (WatchLogs): the last lines of each rank, then new
// ones as they come. At most MAX_LINES are kept; the pane follows the end
// unless the reader scrolled up.
import { useEffect, useRef, useState } from "react";
import type { LogLine } from "../gen/cohort/v1/training_logs_pb";
import { aborted, api, failure } from "../api/client";

const MAX_LINES = 2000;

/** `attempt` restarts the stream when a new attempt starts; the stream of
 * an ended attempt ends by itself after its last lines. */
export function Logs({ trainingId, attempt, live }: { trainingId: string; attempt: number; live: boolean }) {
  const [lines, setLines] = useState<LogLine[]>([]);
  const [rank, setRank] = useState<string>("");
  const [error, setError] = useState<string>();
  const pane = useRef<HTMLPreElement>(null);
  const atEnd = useRef(true);

  useEffect(() => {
    const stop = new AbortController();
    let buffer: LogLine[] = [];
    let dirty = false;
    setLines([]);
    setError(undefined);
    (async () => {
      const stream = api.training.watchLogs(
        { trainingId, tail: 200, follow: true, ranks: rank === "" ? [] : [Number(rank)] },
        { signal: stop.signal },
      );
      for await (const line of stream) {
        buffer.push(line);
        if (buffer.length > MAX_LINES) buffer = buffer.slice(-MAX_LINES);
        dirty = true;
      }
    })().catch((err) => !aborted(err) && setError(failure(err).message));
    const tick = setInterval(() => {
      if (dirty) {
        dirty = false;
        setLines([...buffer]);
      }
    }, 250);
    return () => {
      stop.abort();
      clearInterval(tick);
      if (dirty) setLines([...buffer]);
    };
  }, [trainingId, rank, attempt]);

  useEffect(() => {
    const el = pane.current;
    if (el && atEnd.current) el.scrollTop = el.scrollHeight;
  }, [lines]);

  return (
    <div>
      <div className="filters">
        <label>
          Rank
          <input type="number" min={0} placeholder="all" value={rank} onChange={(e) => setRank(e.target.value)} />
        </label>
        <span className="muted small">{lines.length} lines{live ? " · following" : ""}</span>
      </div>
      {error && <p className="error" role="alert">{error}</p>}
      <pre
        className="logs"
        ref={pane}
        tabIndex={0}
        aria-label="log lines"
        onScroll={(e) => {
          const el = e.currentTarget;
          atEnd.current = el.scrollHeight - el.scrollTop - el.clientHeight < 24;
        }}
      >
        {lines.map((l, i) => (
          <div key={i} className={l.note ? "note" : ""}>
            <span className="muted">[{l.rank}]</span> {l.line}
          </div>
        ))}
        {lines.length === 0 && !error && <span className="muted">No log lines yet.</span>}
      </pre>
    </div>
  );
}
