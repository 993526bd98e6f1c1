export function ProgressBar({ fraction, label }: { fraction?: number; label: string }) {
  const f = fraction === undefined ? undefined : Math.min(1, Math.max(0, fraction));
  return (
    <div className="bar" role="progressbar" aria-label={label} aria-valuemin={0} aria-valuemax={100} aria-valuenow={f === undefined ? undefined : Math.round(f * 100)}>
      <div style={{ width: `${(f ?? 0) * 100}%` }} />
      <span>{label}</span>
    </div>
  );
}
