// @vitest-environment node
import { describe, expect, it } from "vitest";
import { Architecture, CodeSnapshotSchema } from "../../src/gen/cohort/v1/config_pb";
import { codeText } from "../../src/format";
import { configOf, DEFAULTS, fieldErrors } from "../../src/new/saeForm";
import { aggregatePoint } from "../../src/fleet/useFleet";
import { AggregatedGpuMetricsSchema } from "../../src/gen/cohort/v1/telemetry_pb";
import { tar } from "../../src/training/tar";
import { create } from "@bufbuild/protobuf";

describe("the SAE form", () => {
  it("makes the config it shows", () => {
    const c = configOf({ ...DEFAULTS, dIn: "128", k: "16", steps: "50" });
    expect(c.model?.dIn).toBe(128n);
    expect(c.model?.k).toBe(16n);
    expect(c.model?.architecture).toBe(Architecture.TOPK);
    expect(c.optim?.steps).toBe(50n);
    expect(c.data?.source.case).toBe("synthetic");
  });

  it("sends files one per line and no k for ReLU", () => {
    const c = configOf({ ...DEFAULTS, architecture: "relu", data: "files", paths: " a.safetensors\n\nb.safetensors " });
    expect(c.model?.k).toBeUndefined();
    expect(c.data?.source).toEqual(expect.objectContaining({ case: "files" }));
    if (c.data?.source.case === "files") expect(c.data.source.value.paths).toEqual(["a.safetensors", "b.safetensors"]);
  });

  it("puts the server's field errors beside their fields", () => {
    const e = fieldErrors({ "config.model.k": "must be at least 1", "config.data.files.paths[0]": "outside the roots", "gpus": "no" });
    expect(e.k).toBe("must be at least 1");
    expect(e.paths).toBe("outside the roots");
    expect(e[""]).toBe("gpus: no");
  });
});

describe("the fleet's aggregate", () => {
  it("reads the server's aggregate as a chart point", () => {
    const a = create(AggregatedGpuMetricsSchema, { gpuCount: 2, meanUtilizationGpuPercent: 40, memoryUsedBytes: 40n, memoryTotalBytes: 200n, maxTemperatureCelsius: 60, powerDrawWatts: 20 });
    const p = aggregatePoint({ seconds: 10n, nanos: 0 } as never, a);
    expect(p).toEqual({ t: 10, util: 40, mem: 20, temp: 60, power: 20 });
    expect(aggregatePoint(undefined, create(AggregatedGpuMetricsSchema, {})).mem).toBeUndefined();
  });
});

describe("the checkpoint archive", () => {
  it("writes ustar headers with valid checksums, padded to 512 bytes", async () => {
    const blob = tar([{ name: "trn-1-step-100/sae.safetensors", data: new Blob(["hello"]) }]);
    const bytes = new Uint8Array(await blob.arrayBuffer());
    expect(bytes.length).toBe(512 + 512 + 1024);
    const header = bytes.slice(0, 512);
    expect(new TextDecoder().decode(header.slice(257, 262))).toBe("ustar");
    const stored = parseInt(new TextDecoder().decode(header.slice(148, 155)), 8);
    const sum = header.reduce((a, b, i) => a + (i >= 148 && i < 156 ? 32 : b), 0);
    expect(stored).toBe(sum);
    expect(new TextDecoder().decode(bytes.slice(512, 517))).toBe("hello");
  });
});

describe("a program's code snapshot", () => {
  it("reads as its short hash, size and git state", () => {
    const c = create(CodeSnapshotSchema, { sha256: "ab".repeat(32), sizeBytes: 2048n, files: 4n, gitCommit: "c".repeat(40), gitDirty: true });
    expect(codeText(c)).toBe("sha256:abababababab · 4 files · 2.0 KiB · git cccccccccc (dirty)");
    const bare = create(CodeSnapshotSchema, { sha256: "0".repeat(64), sizeBytes: 100n, files: 1n });
    expect(codeText(bare)).toBe("sha256:000000000000 · 1 file · 100 B");
  });
});
