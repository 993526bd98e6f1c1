// A training's checkpoints, each downloadable natively or for SAELens
// (DownloadCheckpoint streamed into the browser, then saved).
import { useEffect, useState } from "react";
import type { Checkpoint } from "../gen/cohort/v1/checkpoint_pb";
import { CheckpointFormat } from "../gen/cohort/v1/checkpoint_pb";
import { aborted, api, failure } from "../api/client";
import { when } from "../format";
import { tar } from "./tar";

export async function download(trainingId: string, step: bigint, format: CheckpointFormat): Promise<{ name: string; blob: Blob }> {
  const files = new Map<string, BlobPart[]>();
  for await (const chunk of api.training.downloadCheckpoint({ trainingId, step, format })) {
    const parts = files.get(chunk.file) ?? [];
    parts.push(chunk.data as BlobPart);
    files.set(chunk.file, parts);
  }
  const base = `${trainingId}-step-${step}${format === CheckpointFormat.SAELENS ? "-saelens" : ""}`;
  const list = [...files].map(([name, parts]) => ({ name, data: new Blob(parts) }));
  if (list.length === 1) return { name: `${base}-${list[0].name.replaceAll("/", "_")}`, blob: list[0].data };
  return { name: `${base}.tar`, blob: tar(list.map((f) => ({ name: `${base}/${f.name}`, data: f.data }))) };
}

function save(name: string, blob: Blob) {
  const url = URL.createObjectURL(blob);
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

export function Checkpoints({ trainingId, program, refreshKey }: { trainingId: string; program: boolean; refreshKey: number }) {
  const [list, setList] = useState<Checkpoint[]>();
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState<string>();
  useEffect(() => {
    const stop = new AbortController();
    api.training
      .listCheckpoints({ trainingId, pageSize: 50 }, { signal: stop.signal })
      .then((r) => setList(r.checkpoints))
      .catch((err) => !aborted(err) && setError(failure(err).message));
    return () => stop.abort();
  }, [trainingId, refreshKey]);
  const get = async (c: Checkpoint, format: CheckpointFormat) => {
    const key = `${c.step}-${format}`;
    setBusy(key);
    setError(undefined);
    try {
      const { name, blob } = await download(trainingId, c.step, format);
      save(name, blob);
    } catch (err) {
      setError(failure(err).message);
    } finally {
      setBusy(undefined);
    }
  };
  return (
    <div>
      {error && <p className="error" role="alert">{error}</p>}
      {list?.length === 0 && <p className="muted">No checkpoint yet.</p>}
      {list && list.length > 0 && (
        <table className="table" aria-label="checkpoints">
          <thead><tr><th>step</th><th>attempt</th><th>written</th><th>where</th><th>download</th></tr></thead>
          <tbody>
            {list.map((c) => (
              <tr key={`${c.attempt}-${c.step}`}>
                <td>{String(c.step)}{c.best && <span className="badge ok">best</span>}</td>
                <td>{c.attempt}</td>
                <td className="small">{when(c.createTime)}</td>
                <td className="small mono">{c.path}</td>
                <td className="actions">
                  <button disabled={!!busy} onClick={() => get(c, CheckpointFormat.NATIVE)}>
                    {busy === `${c.step}-${CheckpointFormat.NATIVE}` ? "Downloading…" : "Native"}
                  </button>
                  {!program && (
                    <button disabled={!!busy} onClick={() => get(c, CheckpointFormat.SAELENS)}>
                      {busy === `${c.step}-${CheckpointFormat.SAELENS}` ? "Downloading…" : "SAELens"}
                    </button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}
