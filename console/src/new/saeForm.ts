// The SAE form's fields and the TrainingConfig they make.
import { create } from "@bufbuild/protobuf";
import { Architecture, TrainingConfigSchema, type TrainingConfig } from "../gen/cohort/v1/config_pb";

export interface SaeFields {
  name: string;
  dIn: string;
  width: "d_sae" | "expansion_factor";
  dSae: string;
  expansionFactor: string;
  architecture: "topk" | "relu";
  k: string;
  l1: string;
  learningRate: string;
  batchSize: string;
  steps: string;
  data: "synthetic" | "files";
  numSamples: string;
  paths: string;
  checkpointEvery: string;
}

export const DEFAULTS: SaeFields = {
  name: "",
  dIn: "64",
  width: "d_sae",
  dSae: "512",
  expansionFactor: "8",
  architecture: "topk",
  k: "8",
  l1: "0.001",
  learningRate: "0.01",
  batchSize: "256",
  steps: "300",
  data: "synthetic",
  numSamples: "100000",
  paths: "",
  checkpointEvery: "100",
};

const int = (s: string) => {
  const n = Number(s);
  return s.trim() === "" || !Number.isFinite(n) ? undefined : BigInt(Math.trunc(n));
};
const real = (s: string) => {
  const n = Number(s);
  return s.trim() === "" || !Number.isFinite(n) ? undefined : n;
};

/** Which form field a server field path (e.g. `config.model.k`) belongs to. */
export const FIELD_OF: Record<string, keyof SaeFields> = {
  "model.d_in": "dIn",
  "model.d_sae": "dSae",
  "model.expansion_factor": "expansionFactor",
  "model.architecture": "architecture",
  "model.k": "k",
  "model.l1_coefficient": "l1",
  "optim.learning_rate": "learningRate",
  "optim.batch_size": "batchSize",
  "optim.steps": "steps",
  "data.synthetic.num_samples": "numSamples",
  "data.synthetic": "numSamples",
  "data.files.paths": "paths",
  "data.files": "paths",
  "checkpoint.every_steps": "checkpointEvery",
};

/** Field errors keyed by form field; the rest under "" (shown on top). */
export function fieldErrors(fields: Record<string, string>): Partial<Record<keyof SaeFields | "", string>> {
  const out: Partial<Record<keyof SaeFields | "", string>> = {};
  for (const [path, why] of Object.entries(fields)) {
    const bare = path.replace(/^config\./, "");
    const key = Object.keys(FIELD_OF)
      .sort((a, b) => b.length - a.length)
      .find((k) => bare === k || bare.startsWith(`${k}.`) || bare.startsWith(`${k}[`));
    const at = key ? FIELD_OF[key] : "";
    out[at] = out[at] ? `${out[at]}; ${why}` : at ? why : `${path}: ${why}`;
  }
  return out;
}

export function configOf(f: SaeFields): TrainingConfig {
  const topk = f.architecture === "topk";
  return create(TrainingConfigSchema, {
    model: {
      dIn: int(f.dIn) ?? 0n,
      ...(f.width === "d_sae" ? { dSae: int(f.dSae) } : { expansionFactor: int(f.expansionFactor) }),
      architecture: topk ? Architecture.TOPK : Architecture.RELU,
      ...(topk ? { k: int(f.k), l1Coefficient: 0 } : { l1Coefficient: real(f.l1) }),
    },
    optim: { learningRate: real(f.learningRate), batchSize: int(f.batchSize) ?? 0n, steps: int(f.steps) },
    checkpoint: { everySteps: int(f.checkpointEvery) },
    data: {
      source:
        f.data === "synthetic"
          ? { case: "synthetic", value: { numSamples: int(f.numSamples) ?? 0n } }
          : { case: "files", value: { paths: f.paths.split("\n").map((p) => p.trim()).filter(Boolean) } },
    },
  });
}

/** The form as a TOML config (what `cohort train submit --config` reads):
 * the editor's starting point. */
export function tomlOf(f: SaeFields): string {
  const topk = f.architecture === "topk";
  const lines = [
    "[model]",
    `d_in = ${f.dIn || 0}`,
    f.width === "d_sae" ? `d_sae = ${f.dSae || 0}` : `expansion_factor = ${f.expansionFactor || 0}`,
    `architecture = "${f.architecture}"`,
    topk ? `k = ${f.k || 0}` : `l1_coefficient = ${f.l1 || 0}`,
    "",
    "[optim]",
    `learning_rate = ${f.learningRate || 0}`,
    `batch_size = ${f.batchSize || 0}`,
    `steps = ${f.steps || 0}`,
    "",
    "[checkpoint]",
    `every_steps = ${f.checkpointEvery || 0}`,
    "",
  ];
  if (f.data === "synthetic") lines.push("[data.synthetic]", `num_samples = ${f.numSamples || 0}`);
  else lines.push("[data.files]", `paths = [${f.paths.split("\n").map((p) => p.trim()).filter(Boolean).map((p) => JSON.stringify(p)).join(", ")}]`);
  return lines.join("\n") + "\n";
}
