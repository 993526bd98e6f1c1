import { afterEach, describe, expect, it } from "vitest";
import { cleanup, render, screen } from "@testing-library/react";
import { create } from "@bufbuild/protobuf";
import { GpuCard } from "../../src/fleet/GpuCard";
import { GpuAvailability, GpuSchema } from "../../src/gen/cohort/v1/gpu_pb";
import { AlertSchema, AlertSeverity } from "../../src/gen/cohort/v1/telemetry_pb";
import { ProgressBar } from "../../src/training/ProgressBar";
import { describe as describeEvent } from "../../src/training/Events";
import { TrainingEventSchema } from "../../src/gen/cohort/v1/training_events_pb";
import { Training_State } from "../../src/gen/cohort/v1/training_pb";

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
