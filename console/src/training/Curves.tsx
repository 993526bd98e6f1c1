// A training's charts: the SAE's metrics (validation points marked), or
// whatever metrics a program reports, one chart each.
import { LineChart, type Series } from "../charts/LineChart";
import { overlay, PALETTE } from "./curves";
import type { TrainingView, Validation } from "./useTraining";

interface Panel {
  title: string;
  keys: string[];
  colors: string[];
  log?: boolean;
  /** The validation field drawn as points on this chart. */
  validation?: keyof Validation;
}

const SAE: Panel[] = [
  { title: "Loss and MSE", keys: ["loss", "mse"], colors: ["#2f6fdf", "#8a4fd8"], log: true, validation: "loss" },
  { title: "L0 (active latents per sample)", keys: ["l0"], colors: ["#3a9d5d"], validation: "l0" },
  { title: "Explained variance", keys: ["explained_variance"], colors: ["#d8663a"], validation: "ev" },
  { title: "Dead latent fraction", keys: ["dead_fraction"], colors: ["#a0522d"], validation: "dead" },
  { title: "Learning rate", keys: ["learning_rate"], colors: ["#6b7280"] },
  { title: "Gradient norm", keys: ["grad_norm"], colors: ["#b8860b"] },
  { title: "Samples per second", keys: ["samples_per_sec"], colors: ["#0e8a8a"] },
];


export function Curves({ view, program }: { view: TrainingView; program: boolean }) {
  const c = view.curves;
  if (c.x.length === 0) {
    return <p className="muted">{view.caughtUp ? "No progress reported yet." : "Loading the history…"}</p>;
  }
  const panels: Panel[] = program
    ? c.keys().filter((k) => c.has(k)).map((k, i) => ({ title: k, keys: [k], colors: [PALETTE[i % PALETTE.length]] }))
    : SAE.filter((p) => p.keys.some((k) => c.has(k)));
  return (
    <div className="grid2">
      {panels.map((p) => {
        const series: Series[] = p.keys.map((k, i) => ({ label: k, color: p.colors[i] }));
        const data = c.data(p.keys);
        if (p.validation && view.validations.length > 0) {
          const field = p.validation;
          series.push({ label: `validation ${String(field)}`, color: "#e11d48", points: true });
          data.push(overlay(c.x, new Map(view.validations.map((v) => [v.step, v[field] as number]))));
        }
        return <LineChart key={p.title} title={p.title} series={series} data={data} log={p.log} xLabel="step" />;
      })}
    </div>
  );
}
