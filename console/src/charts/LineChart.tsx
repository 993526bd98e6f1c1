// A uPlot line chart: x is a step or a time (seconds), one or more y series.
// uPlot draws 100,000 points in a few milliseconds; the chart redraws with
// setData when its data change and follows its container's width.
import { useEffect, useRef } from "react";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";

export interface Series {
  label: string;
  color: string;
  /** Points only, no line (e.g. validation points). */
  points?: boolean;
  /** Which y scale: "y" (default) or a second one drawn on the right. */
  scale?: string;
  format?: (v: number) => string;
}

export interface LineChartProps {
  title: string;
  series: Series[];
  /** [xs, ys of series 0, ys of series 1, ...]; null is a gap. */
  data: (number | null)[][];
  time?: boolean;
  height?: number;
  /** Log scale on y (e.g. a loss over orders of magnitude). */
  log?: boolean;
  xLabel?: string;
}

/** A theme colour for the canvas (which cannot read CSS variables). */
export function themeColor(name: string, fallback: string): string {
  if (typeof window === "undefined") return fallback;
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback;
}

export function LineChart({ title, series, data, time = false, height = 220, log = false, xLabel }: LineChartProps) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const shape = JSON.stringify([series.map((s) => [s.label, s.color, s.points, s.scale]), time, log, height, xLabel]);

  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const scales: uPlot.Scales = { x: { time }, y: log ? { distr: 3 } : {} };
    const muted = themeColor("--muted", "#56606d");
    const grid = themeColor("--grid", "#e3e7ec");
    const axes: uPlot.Axis[] = [
      { label: xLabel, stroke: muted, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } },
      { stroke: muted, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 }, size: 60 },
    ];
    if (series.some((s) => s.scale === "y2")) {
      scales.y2 = {};
      axes.push({ scale: "y2", side: 1, stroke: muted, grid: { show: false }, size: 60 });
    }
    const opts: uPlot.Options = {
      title,
      width: Math.max(200, el.clientWidth),
      height,
      scales,
      axes,
      legend: { live: true },
      cursor: { drag: { x: true, y: false } },
      series: [
        { label: xLabel ?? (time ? "time" : "step") },
        ...series.map((s) => ({
          label: s.label,
          stroke: s.color,
          scale: s.scale ?? "y",
          width: 1.5,
          spanGaps: !s.points,
          value: (_: uPlot, v: number | null) => (v === null ? "–" : s.format ? s.format(v) : String(Number(v.toPrecision(4)))),
          ...(s.points ? { paths: () => null, points: { show: true, size: 7, fill: s.color } } : { points: { show: false } }),
        })),
      ],
    };
    const u = new uPlot(opts, data as uPlot.AlignedData, el);
    plot.current = u;
    const resize = new ResizeObserver(() => u.setSize({ width: Math.max(200, el.clientWidth), height }));
    resize.observe(el);
    return () => {
      resize.disconnect();
      u.destroy();
      plot.current = null;
    };
    // The chart is rebuilt only when its shape changes; data go through setData.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [shape]);

  useEffect(() => {
    plot.current?.setData(data as uPlot.AlignedData);
  }, [data]);

  return <div className="chart" ref={box} role="img" aria-label={title} data-points={data[0]?.length ?? 0} />;
}
