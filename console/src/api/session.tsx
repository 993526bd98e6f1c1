// Who the caller is (WhoAmI), for showing what the role allows. The server
// still decides every call: a hidden button is a courtesy, not a control.
import { createContext, useContext, useEffect, useState, useSyncExternalStore } from "react";
import type { ReactNode } from "react";
import { Role } from "../gen/cohort/v1/admin_pb";
import { api, Code, failure } from "./client";
import { token } from "./token";

export interface Session {
  /** "token", "anonymous" (auth off), ... as the server says. */
  kind: string;
  name: string;
  team: string;
  role: Role;
  /** The server wants a token and this tab has none (or a bad one). */
  needsToken: boolean;
  error?: string;
}

const initial: Session = { kind: "", name: "", team: "", role: Role.UNSPECIFIED, needsToken: false };
const SessionContext = createContext<Session>(initial);

export function SessionProvider({ children }: { children: ReactNode }) {
  const secret = useSyncExternalStore(token.subscribe, token.get);
  const [session, setSession] = useState<Session>(initial);
  useEffect(() => {
    let live = true;
    api.admin
      .whoAmI({})
      .then((me) => live && setSession({ kind: me.kind, name: me.name, team: me.team, role: me.role, needsToken: false }))
      .catch((err) => {
        if (!live) return;
        const f = failure(err);
        const needsToken = f.code === Code.Unauthenticated;
        setSession({ ...initial, needsToken, error: needsToken ? (secret ? f.message : undefined) : f.message });
      });
    return () => {
      live = false;
    };
  }, [secret]);
  return <SessionContext.Provider value={session}>{children}</SessionContext.Provider>;
}

export function useSession(): Session {
  return useContext(SessionContext);
}

/** May submit and cancel trainings (editors and above; anyone with auth off). */
export function canEdit(s: Session): boolean {
  return s.kind === "anonymous" || s.role >= Role.EDITOR;
}

/** May see the admin pages (team admins and cluster admins). */
export function canAdmin(s: Session): boolean {
  return s.kind === "anonymous" || s.role >= Role.ADMIN;
}

/** May run fleet-wide operations (the host doctor): cluster admins; anyone with auth off. */
export function canClusterAdmin(s: Session): boolean {
  return s.kind === "anonymous" || s.role >= Role.CLUSTER_ADMIN;
}
