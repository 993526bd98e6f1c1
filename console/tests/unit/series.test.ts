import { describe, expect, it } from "vitest";
import { append, emptyPoints, WINDOW_S } from "../../src/fleet/history";
import { Columns, MAX_POINTS, overlay } from "../../src/training/curves";

describe("a GPU's history", () => {
  it("keeps one point per interval and only the last hour", () => {
    let p = emptyPoints();
    for (let t = 0; t < 2 * WINDOW_S; t += 1) p = append(p, { t, util: t % 100 }, 5);
    expect(p.t.length).toBeLessThanOrEqual(WINDOW_S / 5 + 1);
    expect(p.t[0]).toBeGreaterThanOrEqual(WINDOW_S - 5);
    expect(p.t.at(-1)).toBe(2 * WINDOW_S - 1);
    expect(p.util.length).toBe(p.t.length);
  });

  it("replaces the last point within the interval", () => {
    let p = append(emptyPoints(), { t: 10, util: 1 });
    p = append(p, { t: 12, util: 2 });
    expect(p.t).toEqual([12]);
    expect(p.util).toEqual([2]);
  });
});

describe("a training's curves", () => {
  it("aligns columns that start late and fills gaps with null", () => {
    const c = new Columns();
    c.push(1, { loss: 1 });
    c.push(2, { loss: 0.5, reward: 3 });
    expect(c.data(["loss", "reward"])).toEqual([[1, 2], [1, 0.5], [null, 3]]);
    expect(c.has("reward")).toBe(true);
    expect(c.has("nope")).toBe(false);
  });

  it("reads NaN as a gap, not a number", () => {
    const c = new Columns();
    c.push(1, { loss: Number.NaN });
    expect(c.data(["loss"])[1]).toEqual([null]);
  });

  it("never holds more than MAX_POINTS points, and keeps the ends' shape", () => {
    const c = new Columns();
    for (let i = 0; i < MAX_POINTS * 3; i++) c.push(i, { loss: i });
    expect(c.x.length).toBeLessThanOrEqual(MAX_POINTS);
    expect(c.x[0]).toBe(0);
    expect(c.x.at(-1)!).toBeGreaterThan(MAX_POINTS * 3 - 10);
    expect(c.cols.get("loss")!.length).toBe(c.x.length);
  });

  it("puts validation points on the nearest step at or after them", () => {
    expect(overlay([0, 10, 20, 30], new Map([[10, 5], [25, 7]]))).toEqual([null, 5, null, 7]);
  });
});

import { secondsLeft } from "../../src/training/useTraining";

describe("the time left", () => {
  it("comes from the recent rate, and only when there is one", () => {
    expect(secondsLeft([], 100)).toBeUndefined();
    expect(secondsLeft([[0, 0]], 100)).toBeUndefined();
    expect(secondsLeft([[0, 0], [10, 10]], 100)).toBe(90);
    expect(secondsLeft([[0, 0], [10, 10]], 10)).toBeUndefined();
  });
});

import { merge } from "../../src/fleet/history";
import { pushProgress } from "../../src/training/curves";
import { create } from "@bufbuild/protobuf";
import { TrainingEventSchema } from "../../src/gen/cohort/v1/training_events_pb";

describe("history and live points together", () => {
  it("keeps the live points after the history", () => {
    let h = emptyPoints();
    h = append(h, { t: 0, util: 1 }, 1);
    h = append(h, { t: 30, util: 2 }, 1);
    let live = emptyPoints();
    live = append(live, { t: 60, util: 3 });
    const m = merge(h, live);
    expect(m.t).toEqual([0, 30, 60]);
    expect(m.util).toEqual([1, 2, 3]);
  });
});

describe("progress events as curve points", () => {
  it("reads the SAE's and a program's, and nothing else", () => {
    const c = new Columns();
    expect(pushProgress(c, create(TrainingEventSchema, { event: { case: "progress", value: { step: 5n, loss: 0.5, l0: 8 } } }))).toBe(5n);
    expect(pushProgress(c, create(TrainingEventSchema, { event: { case: "programProgress", value: { step: 6n, metrics: { reward: 2 } } } }))).toBe(6n);
    expect(pushProgress(c, create(TrainingEventSchema, { event: { case: "checkpoint", value: { step: 6n } } }))).toBeUndefined();
    expect(c.x).toEqual([5, 6]);
    expect(c.data(["l0", "reward"])).toEqual([[5, 6], [8, null], [null, 2]]);
  });
});
