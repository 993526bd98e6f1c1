// The bearer token of this tab (sessionStorage: kept across reloads of the
// tab, never shared with other tabs, gone when the tab closes).
const KEY = "cohort.token";
const listeners = new Set<() => void>();

export const token = {
  get(): string {
    try {
      return sessionStorage.getItem(KEY) ?? "";
    } catch {
      return "";
    }
  },
  set(secret: string) {
    if (secret) sessionStorage.setItem(KEY, secret);
    else sessionStorage.removeItem(KEY);
    listeners.forEach((l) => l());
  },
  subscribe(listener: () => void): () => void {
    listeners.add(listener);
    return () => listeners.delete(listener);
  },
};
