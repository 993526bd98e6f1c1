import { afterEach, describe, expect, it } from "vitest";
import { cleanup, render, screen } from "@testing-library/react";
import { create } from "@bufbuild/protobuf";
import { GpuCard } from "../../src/fleet/GpuCard";
import { GpuAvailability, GpuSchema } from "../../src/gen/cohort/v1/gpu_pb";
import { AlertSchema, AlertSeverity } from "../../src/gen/cohort/v1/telemetry_pb";
import { ProgressBar } from "../../src/training/ProgressBar";
import { Sizes, sizeSteps } from "../../src/training/Sizes";
import { describe as describeEvent } from "../../src/training/Events";
import { TrainingEventSchema } from "../../src/gen/cohort/v1/training_events_pb";
import { Training_State } from "../../src/gen/cohort/v1/training_pb";
import { DoctorChecks, verdict } from "../../src/fleet/Hosts";
import { DoctorReportSchema, DoctorStatus } from "../../src/gen/cohort/v1/agent_maintenance_pb";

afterEach(cleanup);

describe("GpuCard", () => {
  const gpu = create(GpuSchema, {
    info: { index: 1, uuid: "GPU-sim-1", name: "Simulated GPU", memoryTotalBytes: 16n << 30n, simulated: true },
    agentName: "host-a",
    hostName: "host-a.local",
    availability: GpuAvailability.BUSY,
    trainingId: "trn-42",
    rank: 3,
    latestSample: { gpuUuid: "GPU-sim-1", utilizationGpuPercent: 87, memoryUsedBytes: 4n << 30n, memoryTotalBytes: 16n << 30n, temperatureCelsius: 61, powerDrawWatts: 250 },
  });

  it("names the GPU, marks it simulated and shows who holds it", () => {
    render(<GpuCard gpu={gpu} alerts={[]} />);
    const card = screen.getByRole("article", { name: "host-a · GPU 1" });
    expect(card.textContent).toContain("simulated");
    expect(card.textContent).toContain("busy");
    expect(screen.getByRole("link", { name: "trn-42" }).getAttribute("href")).toBe("/trainings/trn-42");
    expect(card.textContent).toContain("rank 3");
    expect(card.textContent).toContain("87%");
    expect(card.textContent).toContain("4.0 GiB / 16 GiB");
    expect(card.textContent).toContain("61 °C");
  });

  it("shows the GPU's alerts on its card", () => {
    const alert = create(AlertSchema, { id: "a1", severity: AlertSeverity.CRITICAL, kind: "gpu_temperature", message: "92 °C over 90 °C", gpuUuid: "GPU-sim-1" });
    render(<GpuCard gpu={gpu} alerts={[alert]} />);
    const list = screen.getByRole("list", { name: "alerts" });
    expect(list.textContent).toContain("gpu_temperature: 92 °C over 90 °C");
  });
});

describe("ProgressBar", () => {
  it("says how far it is, to assistive technology too", () => {
    render(<ProgressBar fraction={0.25} label="step 25 / 100" />);
    const bar = screen.getByRole("progressbar", { name: "step 25 / 100" });
    expect(bar.getAttribute("aria-valuenow")).toBe("25");
  });

  it("has no value when the total is unknown", () => {
    render(<ProgressBar label="step 7" />);
    expect(screen.getByRole("progressbar").getAttribute("aria-valuenow")).toBeNull();
  });
});

describe("events", () => {
  it("read as sentences", () => {
    const ev = create(TrainingEventSchema, { event: { case: "stateChange", value: { from: Training_State.RUNNING, to: Training_State.FAILED, reason: "rank 1 exited with 3" } } });
    expect(describeEvent(ev)).toBe("running → failed: rank 1 exited with 3");
  });
});

describe("the host doctor's report", () => {
  const report = create(DoctorReportSchema, {
    agent: "gpu-host-7",
    ok: false,
    checks: [
      { name: "driver", status: DoctorStatus.FAIL, value: "no driver", detail: "NVML could not be loaded" },
      { name: "all_reduce", status: DoctorStatus.PASS, value: "0.9 GB/s bus bandwidth", detail: "gloo" },
      { name: "topology", status: DoctorStatus.SKIP, value: "no GPU", detail: "no GPU to connect" },
    ],
    duration: { seconds: 2n, nanos: 500_000_000 },
  });

  it("names the failed checks in the verdict", () => {
    expect(verdict(report)).toEqual({ text: "failed: driver", tone: "bad" });
    expect(verdict(create(DoctorReportSchema, { ok: true })).tone).toBe("ok");
    expect(verdict(undefined).text).toBe("never checked");
  });

  it("shows every check with its status, value and reason", () => {
    render(<DoctorChecks report={report} />);
    const table = screen.getByLabelText("doctor report of gpu-host-7");
    expect(table.textContent).toContain("not ready · ran 2.5 s");
    const rows = table.querySelectorAll("tbody tr");
    expect(rows).toHaveLength(3);
    expect(rows[0].className).toBe("critical");
    expect(rows[0].textContent).toContain("driverfailno driverNVML could not be loaded");
    expect(rows[2].textContent).toContain("skip");
  });
});

describe("sharing the fleet", () => {
  it("says who a preemption made room for and what it resumes from", () => {
    const ev = create(TrainingEventSchema, {
      sequence: 9n,
      event: { case: "preempted", value: { by: "trn-urgent", kind: "preempt", priorityClass: "urgent", resumeStep: 240n, gpuSecondsLost: 0.4, checkpointed: true } },
    });
    expect(describeEvent(ev)).toBe("preempted by trn-urgent (class urgent): resumes from step 240, 0.4 GPU-seconds lost, checkpointed on notice");
    const reclaim = create(TrainingEventSchema, { event: { case: "preempted", value: { by: "trn-mine", kind: "reclaim", gpuSecondsLost: 120 } } });
    expect(describeEvent(reclaim)).toBe("reclaimed for trn-mine: resumes from the start, 120 GPU-seconds lost");
  });

  it("reads a start estimate, an end estimate, or why there is none", async () => {
    const { estimate } = await import("../../src/format");
    const { TrainingSchema } = await import("../../src/gen/cohort/v1/training_pb");
    const now = Date.UTC(2026, 10, 27, 12, 0, 0);
    const at = (s: number) => ({ seconds: BigInt(Math.floor(now / 1000) + s), nanos: 0 });
    const queued = create(TrainingSchema, { state: Training_State.QUEUED, estimatedStartTime: at(750) });
    expect(estimate(queued, now).text).toBe("starts in 12m 30s");
    const running = create(TrainingSchema, { state: Training_State.RUNNING, estimatedEndTime: at(3 * 3600 + 600) });
    expect(estimate(running, now).text).toBe("ends in 3h 10m");
    const unknown = create(TrainingSchema, { state: Training_State.QUEUED, estimateReason: "NO_DURATION: waits behind training t-1" });
    expect(estimate(unknown, now)).toEqual({ text: "no estimate", why: "NO_DURATION: waits behind training t-1" });
    expect(estimate(create(TrainingSchema, { state: Training_State.SUCCEEDED }), now).text).toBe("–");
  });
});

describe("an elastic training's sizes", () => {
  const started = (seconds: number, worldSize: number) =>
    create(TrainingEventSchema, { time: { seconds: BigInt(seconds), nanos: 0 }, event: { case: "started", value: { worldSize } } });
  const events = [started(100, 2), started(160, 4), started(170, 4), started(300, 2)];

  it("are a step per size change, oldest first", () => {
    expect(sizeSteps(events)).toEqual([
      { at: 100_000, size: 2 },
      { at: 160_000, size: 4 },
      { at: 300_000, size: 2 },
    ]);
  });

  it("are drawn with their range and said to assistive technology", () => {
    render(<Sizes events={events} min={2} max={4} now={400_000} />);
    const chart = screen.getByRole("img");
    expect(chart.getAttribute("aria-label")).toMatch(/^size over time: 2 from .*, 4 from .*, 2 from /);
    expect(screen.getByText("GPUs over time (range 2..4, dashed)")).toBeTruthy();
  });

  it("change in events that read as sentences", () => {
    const resized = create(TrainingEventSchema, {
      event: { case: "resized", value: { fromWorldSize: 2, toWorldSize: 4, step: 640n, seconds: 1.9, reason: "grow" } },
    });
    expect(describeEvent(resized)).toContain("resized: 2 → 4 ranks at step 640");
    expect(describeEvent(resized)).toContain("(grow)");
  });

  it("say how it starts before it has", () => {
    render(<Sizes events={[]} min={2} max={8} now={0} />);
    expect(screen.getByText(/starts at the largest of 2..8 GPUs that fits/)).toBeTruthy();
  });
});
