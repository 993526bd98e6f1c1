// A mini-chart for a GPU card: one series over time, no axes.
import { useEffect, useRef } from "react";
import uPlot from "uplot";

export function Spark({ label, xs, ys, color, max }: { label: string; xs: number[]; ys: (number | null)[]; color: string; max?: number }) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const u = new uPlot(
      {
        width: Math.max(80, el.clientWidth),
        height: 36,
        legend: { show: false },
        cursor: { show: false },
        scales: { x: { time: true }, y: { range: (_u, lo, hi) => [0, max ?? Math.max(hi, lo + 1)] } },
        axes: [{ show: false }, { show: false }],
        series: [{}, { stroke: color, width: 1.25, fill: `${color}33`, points: { show: false } }],
      },
      [xs, ys] as uPlot.AlignedData,
      el,
    );
    plot.current = u;
    const resize = new ResizeObserver(() => u.setSize({ width: Math.max(80, el.clientWidth), height: 36 }));
    resize.observe(el);
    return () => {
      resize.disconnect();
      u.destroy();
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [color, max]);
  useEffect(() => {
    plot.current?.setData([xs, ys] as uPlot.AlignedData);
  }, [xs, ys]);
  return <div className="spark" ref={box} role="img" aria-label={label} title={label} />;
}
