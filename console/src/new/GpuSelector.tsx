// The GPU selector: every GPU with its free memory, a Recommend button
// (RecommendGpus), and the memory estimate of the config against each
// chosen GPU (EstimateMemory, ValidateGpuSelection) with the global batch.
import { useEffect, useState } from "react";
import type { TrainingConfig } from "../gen/cohort/v1/config_pb";
import type { Gpu, MemoryEstimate, ValidateGpuSelectionResponse } from "../gen/cohort/v1/gpu_pb";
import { GpuAvailability } from "../gen/cohort/v1/gpu_pb";
import { aborted, api, failure } from "../api/client";
import { bytes } from "../format";

export interface Selection {
  /** Empty: let the coordinator choose (auto). */
  ids: string[];
}

function free(g: Gpu): bigint {
  const s = g.latestSample;
  const total = s?.memoryTotalBytes || g.info?.memoryTotalBytes || 0n;
  return total - (s?.memoryUsedBytes ?? 0n);
}

export function GpuSelector({ config, value, onChange }: { config?: TrainingConfig; value: string[]; onChange: (ids: string[]) => void }) {
  const [gpus, setGpus] = useState<Gpu[]>([]);
  const [estimate, setEstimate] = useState<MemoryEstimate>();
  const [check, setCheck] = useState<ValidateGpuSelectionResponse>();
  const [note, setNote] = useState<string>();
  const [error, setError] = useState<string>();

  useEffect(() => {
    const stop = new AbortController();
    api.gpu.listGpus({ pageSize: 1000 }, { signal: stop.signal }).then((r) => setGpus(r.gpus)).catch((err) => !aborted(err) && setError(failure(err).message));
    return () => stop.abort();
  }, []);

  // The estimate and the check follow the config and the selection (debounced).
  const key = config ? JSON.stringify(config, (_k, v) => (typeof v === "bigint" ? v.toString() : v)) : "";
  useEffect(() => {
    if (!config) return;
    const stop = new AbortController();
    const timer = setTimeout(() => {
      api.gpu.estimateMemory({ config }, { signal: stop.signal }).then((e) => { setEstimate(e); setError(undefined); }).catch((err) => {
        if (aborted(err)) return;
        setEstimate(undefined);
      });
      if (value.length > 0)
        api.gpu.validateGpuSelection({ gpuIds: value, config }, { signal: stop.signal }).then(setCheck).catch((err) => !aborted(err) && setCheck(undefined));
      else setCheck(undefined);
    }, 300);
    return () => {
      clearTimeout(timer);
      stop.abort();
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [key, value.join(",")]);

  const recommend = async () => {
    if (!config) return;
    setNote(undefined);
    try {
      const r = await api.gpu.recommendGpus({ need: { case: "config", value: config }, count: 0 });
      onChange(r.gpus.map((g) => g.info?.uuid ?? "").filter(Boolean));
      setNote(r.shortfallReason || `Recommended ${r.gpus.length} GPU(s): global batch ${r.globalBatchSize} (${r.perRankBatchSize} per rank).`);
    } catch (err) {
      setNote(failure(err).message);
    }
  };

  const need = estimate?.totalBytes ?? 0n;
  const toggle = (uuid: string, on: boolean) => onChange(on ? [...value, uuid] : value.filter((v) => v !== uuid));
  const problems = new Map((check?.problems ?? []).map((p) => [p.gpuId, p.message]));

  return (
    <fieldset className="gpu-selector">
      <legend>GPUs</legend>
      <div className="filters">
        <button type="button" onClick={recommend} disabled={!config}>Recommend</button>
        <button type="button" onClick={() => onChange([])} disabled={value.length === 0}>Auto (let the coordinator choose)</button>
        <span className="small">{value.length === 0 ? "auto" : `${value.length} chosen`}{estimate ? ` · needs ${bytes(need)} per GPU` : ""}</span>
      </div>
      {note && <p className="small" role="status">{note}</p>}
      {error && <p className="error" role="alert">{error}</p>}
      {check && (
        <p className={check.valid ? "ok small" : "error small"} role="status">
          {check.valid ? "This selection fits." : "This selection does not fit."} Global batch {String(check.globalBatchSize)} ({String(check.perRankBatchSize)} per rank).
        </p>
      )}
      <ul className="gpu-list">
        {gpus.map((g) => {
          const uuid = g.info?.uuid ?? "";
          const total = g.latestSample?.memoryTotalBytes || g.info?.memoryTotalBytes || 0n;
          const fits = need === 0n || need <= free(g);
          const share = total > 0n ? Math.min(1, Number(need) / Number(total)) : 0;
          const busy = g.availability !== GpuAvailability.AVAILABLE;
          const id = `gpu-${uuid}`;
          return (
            <li key={uuid} className={fits ? "" : "nofit"}>
              <input id={id} type="checkbox" checked={value.includes(uuid)} onChange={(e) => toggle(uuid, e.target.checked)} />
              <label htmlFor={id}>
                <strong>{g.agentName} · GPU {g.info?.index}</strong> {g.info?.name}{g.info?.simulated ? " (simulated)" : ""} — {bytes(free(g))} free of {bytes(total)}{busy ? ` · ${GpuAvailability[g.availability].replace("GPU_AVAILABILITY_", "").toLowerCase()}` : ""}
              </label>
              <div className={`membar ${fits ? "" : "over"}`} role="meter" aria-label={`estimated memory on ${g.agentName} GPU ${g.info?.index}`} aria-valuemin={0} aria-valuemax={100} aria-valuenow={Math.round(share * 100)}>
                <div style={{ width: `${share * 100}%` }} />
                <span>{estimate ? `${bytes(need)} of ${bytes(total)}` : "–"}</span>
              </div>
              {problems.get(uuid) && <p className="error small">{problems.get(uuid)}</p>}
            </li>
          );
        })}
      </ul>
    </fieldset>
  );
}
