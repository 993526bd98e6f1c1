// The console's URLs, kept in the address bar (history API): every page can
// be bookmarked and shared, and back/forward work.
import { useSyncExternalStore } from "react";
import type { AnchorHTMLAttributes, MouseEvent } from "react";

const listeners = new Set<() => void>();
window.addEventListener("popstate", () => listeners.forEach((l) => l()));

function subscribe(l: () => void) {
  listeners.add(l);
  return () => listeners.delete(l);
}

const location = () => window.location.pathname + window.location.search;

export function navigate(to: string) {
  if (to === location()) return;
  window.history.pushState(null, "", to);
  window.scrollTo(0, 0);
  listeners.forEach((l) => l());
}

/** The current path and query, e.g. `/trainings?state=RUNNING`. */
export function useLocation(): { path: string; query: URLSearchParams } {
  const loc = useSyncExternalStore(subscribe, location);
  const [path, search = ""] = loc.split("?");
  return { path, query: new URLSearchParams(search) };
}

/** Replaces the query (filters) without a new history entry. */
export function setQuery(query: URLSearchParams) {
  const qs = query.toString();
  window.history.replaceState(null, "", window.location.pathname + (qs ? `?${qs}` : ""));
  listeners.forEach((l) => l());
}

export function Link(props: AnchorHTMLAttributes<HTMLAnchorElement> & { href: string }) {
  const onClick = (e: MouseEvent<HTMLAnchorElement>) => {
    props.onClick?.(e);
    if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    e.preventDefault();
    navigate(props.href);
  };
  return <a {...props} onClick={onClick} />;
}
