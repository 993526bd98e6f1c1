// `/new`: submit a training from the SAE form or from a config in the
// editor (any config, a program's included), with the GPU selector. The
// server validates; its field errors are shown beside the fields.
import { useEffect, useMemo, useState } from "react";
import type { ReactNode } from "react";
import type { TrainingConfig } from "../gen/cohort/v1/config_pb";
import { ParseTrainingConfigRequest_Format as Format, type PriorityClass } from "../gen/cohort/v1/training_service_pb";
import { aborted, api, failure } from "../api/client";
import { canEdit, useSession } from "../api/session";
import { navigate } from "../router";
import { GpuSelector } from "../new/GpuSelector";
import { configOf, DEFAULTS, fieldErrors, tomlOf, type SaeFields } from "../new/saeForm";

type Errors = Partial<Record<keyof SaeFields | "", string>>;

function Field({ id, label, error, hint, children }: { id: string; label: string; error?: string; hint?: string; children: ReactNode }) {
  return (
    <div className={`field ${error ? "invalid" : ""}`}>
      <label htmlFor={id}>{label}</label>
      {children}
      {hint && <span className="muted small">{hint}</span>}
      {error && <span className="error small" id={`${id}-error`} role="alert">{error}</span>}
    </div>
  );
}

export function NewTrainingPage() {
  const session = useSession();
  const [mode, setMode] = useState<"form" | "editor">("form");
  const [f, setF] = useState<SaeFields>(DEFAULTS);
  const [text, setText] = useState("");
  const [format, setFormat] = useState<Format>(Format.TOML);
  const [editorParse, setEditorParse] = useState<{ config?: TrainingConfig; error?: string }>({});
  const [gpus, setGpus] = useState<string[]>([]);
  const [errors, setErrors] = useState<Errors>({});
  const [busy, setBusy] = useState(false);
  const [classes, setClasses] = useState<PriorityClass[]>([]);
  const [priorityClass, setPriorityClass] = useState("");
  const [borrow, setBorrow] = useState(true);

  // The coordinator's priority classes, highest first; the default chosen.
  useEffect(() => {
    const stop = new AbortController();
    api.training
      .listPriorityClasses({}, { signal: stop.signal })
      .then((r) => {
        setClasses(r.classes);
        setPriorityClass((c) => c || r.defaultClass);
      })
      .catch(() => undefined);
    return () => stop.abort();
  }, []);

  // The editor's text is read by the server, as `cohort train submit --config` reads a file.
  useEffect(() => {
    if (mode !== "editor") return;
    const stop = new AbortController();
    const timer = setTimeout(() => {
      api.training
        .parseTrainingConfig({ text, format }, { signal: stop.signal })
        .then((config) => setEditorParse({ config }))
        .catch((err) => {
          if (aborted(err)) return;
          const fail = failure(err);
          const fields = Object.entries(fail.fields).map(([k, v]) => `${k.replace(/^config\./, "")}: ${v}`);
          setEditorParse({ error: fields.length > 0 ? fields.join("; ") : fail.message });
        });
    }, 300);
    return () => {
      clearTimeout(timer);
      stop.abort();
    };
  }, [mode, text, format]);
  const formConfig = useMemo(() => configOf(f), [f]);
  const parsed = mode === "form" ? { config: formConfig } : editorParse;

  const set = (k: keyof SaeFields) => (e: { target: { value: string } }) => setF({ ...f, [k]: e.target.value });
  const input = (k: keyof SaeFields, props: Record<string, unknown> = {}) => (
    <input id={k} value={f[k]} onChange={set(k)} aria-invalid={!!errors[k]} aria-describedby={errors[k] ? `${k}-error` : undefined} {...props} />
  );
  const toEditor = () => {
    if (!text) setText(tomlOf(f));
    setMode("editor");
  };

  const submit = async (e: React.FormEvent) => {
    e.preventDefault();
    if (!parsed.config) return;
    setBusy(true);
    setErrors({});
    try {
      const t = await api.training.createTraining({
        requestId: crypto.randomUUID(),
        config: parsed.config,
        displayName: f.name.trim(),
        gpus: gpus.length > 0 ? { selection: { case: "gpuIds", value: { ids: gpus } } } : undefined,
        priorityClass,
        borrow,
      });
      navigate(`/trainings/${t.id}`);
    } catch (err) {
      const fail = failure(err);
      const byField = mode === "form" ? fieldErrors(fail.fields) : {};
      const rest = Object.entries(fail.fields).map(([k, v]) => `${k}: ${v}`).join("; ");
      setErrors({ ...byField, "": mode === "form" ? byField[""] ?? (Object.keys(fail.fields).length ? undefined : fail.message) : rest || fail.message });
    } finally {
      setBusy(false);
    }
  };

  if (!canEdit(session)) {
    return <main><h1>New training</h1><p className="muted">Your role ({session.kind || "none"}) may not submit trainings.</p></main>;
  }
  return (
    <main>
      <div className="title-row">
        <h1>New training</h1>
        <div className="toggle" role="radiogroup" aria-label="how to write the config">
          <button type="button" role="radio" aria-checked={mode === "form"} className={mode === "form" ? "on" : ""} onClick={() => setMode("form")}>SAE form</button>
          <button type="button" role="radio" aria-checked={mode === "editor"} className={mode === "editor" ? "on" : ""} onClick={toEditor}>Config editor</button>
        </div>
      </div>
      <form onSubmit={submit} className="new-training" noValidate>
        {errors[""] && <p className="error" role="alert">{errors[""]}</p>}
        <Field id="name" label="Name" hint="optional">{input("name", { placeholder: "my-sae" })}</Field>
        {mode === "form" ? (
          <>
            <fieldset>
              <legend>Model</legend>
              <Field id="dIn" label="d_in" error={errors.dIn}>{input("dIn", { type: "number", min: 1 })}</Field>
              <Field id="width" label="Width given by">
                <select id="width" value={f.width} onChange={set("width")}><option value="d_sae">d_sae</option><option value="expansion_factor">expansion factor</option></select>
              </Field>
              {f.width === "d_sae" ? (
                <Field id="dSae" label="d_sae" error={errors.dSae}>{input("dSae", { type: "number", min: 1 })}</Field>
              ) : (
                <Field id="expansionFactor" label="Expansion factor" error={errors.expansionFactor}>{input("expansionFactor", { type: "number", min: 1 })}</Field>
              )}
              <Field id="architecture" label="Architecture" error={errors.architecture}>
                <select id="architecture" value={f.architecture} onChange={set("architecture")}><option value="topk">TopK</option><option value="relu">ReLU + L1</option></select>
              </Field>
              {f.architecture === "topk" ? (
                <Field id="k" label="k" error={errors.k} hint="latents kept per sample">{input("k", { type: "number", min: 1 })}</Field>
              ) : (
                <Field id="l1" label="L1 coefficient" error={errors.l1}>{input("l1", { type: "number", step: "any" })}</Field>
              )}
            </fieldset>
            <fieldset>
              <legend>Optimization</legend>
              <Field id="learningRate" label="Learning rate" error={errors.learningRate}>{input("learningRate", { type: "number", step: "any" })}</Field>
              <Field id="batchSize" label="Batch size per rank" error={errors.batchSize}>{input("batchSize", { type: "number", min: 1 })}</Field>
              <Field id="steps" label="Steps" error={errors.steps}>{input("steps", { type: "number", min: 1 })}</Field>
              <Field id="checkpointEvery" label="Checkpoint every (steps)" error={errors.checkpointEvery}>{input("checkpointEvery", { type: "number", min: 1 })}</Field>
            </fieldset>
            <fieldset>
              <legend>Data</legend>
              <Field id="data" label="Source">
                <select id="data" value={f.data} onChange={set("data")}><option value="synthetic">synthetic</option><option value="files">files (safetensors / parquet / npy)</option></select>
              </Field>
              {f.data === "synthetic" ? (
                <Field id="numSamples" label="Samples" error={errors.numSamples}>{input("numSamples", { type: "number", min: 1 })}</Field>
              ) : (
                <Field id="paths" label="Paths (one per line, under an agent's data root)" error={errors.paths}>
                  <textarea id="paths" rows={3} value={f.paths} onChange={set("paths")} aria-invalid={!!errors.paths} />
                </Field>
              )}
            </fieldset>
          </>
        ) : (
          <>
            <Field id="format" label="Written as">
              <select id="format" value={format} onChange={(e) => setFormat(Number(e.target.value) as Format)}>
                <option value={Format.TOML}>TOML</option>
                <option value={Format.JSON}>JSON</option>
              </select>
            </Field>
            <Field id="config" label="Config (as cohort train submit --config reads it)" error={parsed.error} hint="Any config: the SAE's (every key: docs/rank.md) or a program's [program] (docs/programs.md). The server checks it as you type.">
              <textarea id="config" className="mono" rows={22} value={text} onChange={(e) => setText(e.target.value)} spellCheck={false} aria-invalid={!!parsed.error} />
            </Field>
          </>
        )}
        <fieldset>
          <legend>Scheduling</legend>
          <Field id="priorityClass" label="Priority class" hint="a preempting class may preempt lower ones when the fleet is full">
            <select id="priorityClass" value={priorityClass} onChange={(e) => setPriorityClass(e.target.value)}>
              {classes.map((c) => (
                <option key={c.name} value={c.name}>{c.name} ({c.value}{c.preempting ? ", preempts" : ""})</option>
              ))}
            </select>
          </Field>
          <Field id="borrow" label="Borrow idle quota" hint="run beyond the team's guaranteed GPUs while others' sit idle (it may then be reclaimed)">
            <input id="borrow" type="checkbox" checked={borrow} onChange={(e) => setBorrow(e.target.checked)} />
          </Field>
        </fieldset>
        <GpuSelector config={parsed.config} value={gpus} onChange={setGpus} />
        <div className="actions">
          <button type="submit" className="primary" disabled={busy || !parsed.config}>{busy ? "Submitting…" : "Submit training"}</button>
        </div>
      </form>
    </main>
  );
}
