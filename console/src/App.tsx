// The shell: navigation, the tab's token, and the page the URL names.
import { useState } from "react";
import { canAdmin, canEdit, SessionProvider, useSession } from "./api/session";
import { token } from "./api/token";
import { Link, useLocation } from "./router";
import { AdminPage } from "./pages/Admin";
import { AlertsPage } from "./pages/Alerts";
import { ComparePage } from "./pages/Compare";
import { FleetPage } from "./pages/Fleet";
import { NewTrainingPage } from "./pages/NewTraining";
import { SweepPage, SweepsPage } from "./pages/Sweeps";
import { TrainingPage } from "./pages/Training";
import { TrainingsPage } from "./pages/Trainings";

function TokenPrompt({ error }: { error?: string }) {
  const [value, setValue] = useState("");
  return (
    <main className="narrow">
      <h1>Sign in</h1>
      <p>This coordinator asks for a token. It is kept in this tab only and sent with each call.</p>
      {error && <p className="error" role="alert">{error}</p>}
      <form onSubmit={(e) => { e.preventDefault(); token.set(value.trim()); }}>
        <label htmlFor="token">Token</label>
        <input id="token" type="password" autoComplete="off" value={value} onChange={(e) => setValue(e.target.value)} autoFocus />
        <button type="submit" className="primary" disabled={!value.trim()}>Use token</button>
      </form>
      <p className="muted small">Get one with <code>cohort admin token create --team TEAM --name NAME --role viewer</code>.</p>
    </main>
  );
}

function Page() {
  const { path } = useLocation();
  const session = useSession();
  if (session.needsToken) return <TokenPrompt error={session.error} />;
  if (path === "/" || path === "") return <FleetPage />;
  if (path === "/trainings") return <TrainingsPage />;
  const m = path.match(/^\/trainings\/([^/]+)$/);
  if (m) return <TrainingPage key={m[1]} id={decodeURIComponent(m[1])} />;
  if (path === "/sweeps") return <SweepsPage />;
  const sweep = path.match(/^\/sweeps\/([^/]+)$/);
  if (sweep) return <SweepPage key={sweep[1]} id={decodeURIComponent(sweep[1])} />;
  if (path === "/new") return <NewTrainingPage />;
  if (path === "/alerts") return <AlertsPage />;
  if (path === "/compare") return <ComparePage />;
  if (path === "/admin") return <AdminPage />;
  return <main><h1>Not found</h1><p>No page at {path}. <Link href="/">The fleet</Link></p></main>;
}

function Nav() {
  const { path } = useLocation();
  const session = useSession();
  const item = (href: string, label: string) => {
    const current = href === "/" ? path === "/" : path.startsWith(href);
    return <Link href={href} aria-current={current ? "page" : undefined}>{label}</Link>;
  };
  return (
    <header className="top">
      <nav aria-label="main">
        <Link href="/" className="brand">cohort</Link>
        {item("/", "Fleet")}
        {item("/trainings", "Trainings")}
        {item("/sweeps", "Sweeps")}
        {canEdit(session) && item("/new", "New training")}
        {item("/alerts", "Alerts")}
        {canAdmin(session) && item("/admin", "Admin")}
      </nav>
      <div className="who small">
        {session.kind === "token" && <>{session.name} · {session.team} <button className="link" onClick={() => token.set("")}>Sign out</button></>}
        {session.kind === "anonymous" && <span className="muted">auth off</span>}
      </div>
    </header>
  );
}

export function App() {
  return (
    <SessionProvider>
      <Nav />
      <Page />
    </SessionProvider>
  );
}
