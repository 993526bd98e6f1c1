// The active alerts, live (WatchAlerts with include_active): one stream per
// page that needs them; raised alerts come in, resolved ones leave.
import { useEffect, useState } from "react";
import type { Alert } from "../gen/cohort/v1/telemetry_pb";
import { aborted, api, failure } from "../api/client";

export interface AlertsState {
  active: Alert[];
  resolved: Alert[];
  caughtUp: boolean;
  error?: string;
}

const KEEP_RESOLVED = 200;

export function useAlerts(resolvedWithinS = 0): AlertsState {
  const [state, setState] = useState<AlertsState>({ active: [], resolved: [], caughtUp: false });
  useEffect(() => {
    const stop = new AbortController();
    const active = new Map<string, Alert>();
    let resolved: Alert[] = [];
    let caughtUp = false;
    const publish = () => setState({ active: [...active.values()], resolved, caughtUp });
    (async () => {
      const stream = api.telemetry.watchAlerts(
        { includeActive: true, resolvedWithin: resolvedWithinS ? { seconds: BigInt(resolvedWithinS) } : undefined },
        { signal: stop.signal },
      );
      for await (const msg of stream) {
        const ev = msg.event;
        if (ev.case === "alert") {
          const a = ev.value;
          if (a.resolveTime) {
            active.delete(a.id);
            resolved = [a, ...resolved.filter((r) => r.id !== a.id)].slice(0, KEEP_RESOLVED);
          } else active.set(a.id, a);
        } else if (ev.case === "caughtUp") caughtUp = true;
        if (caughtUp) publish();
      }
    })().catch((err) => {
      if (!aborted(err)) setState((s) => ({ ...s, error: failure(err).message }));
    });
    return () => stop.abort();
  }, [resolvedWithinS]);
  return state;
}
