//! ListCheckpoints and DownloadCheckpoint: a training's complete checkpoints
//! (those rank 0 still keeps), and the files of one streamed out, natively or
//! converted for SAELens.

use super::error::ApiError;
use super::page_token::page_size;
use super::BoxStream;
use crate::context::Context;
use crate::export::source::{Holder, Layout, Source, CHUNK};
use crate::export::{saelens, ExportError, ExportFailure};
use crate::model::Principal;
use crate::persistence::CheckpointRecord;
use cohort_proto::error::Reason;
use cohort_proto::v1;
use cohort_spec::checkpoint::{Manifest, MANIFEST_FILE as MANIFEST, STATE_FILE as STATE};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

type ChunkStream = BoxStream<Result<v1::CheckpointChunk, Status>>;

/// What a training's checkpoints are.
struct Kept {
    /// The step checkpoints rank 0 still keeps (the newest
    /// `checkpoint.keep`; it prunes older ones as it writes), newest first.
    steps: Vec<CheckpointRecord>,
    /// The best one (`best/`), apart from `keep`.
    best: Option<CheckpointRecord>,
    /// Their shared storage (`checkpoint.storage`), if any.
    storage: Option<String>,
    /// The training's team (for the audit row of a download).
    team: String,
    /// A program's: its checkpoints are directories as it wrote them.
    program: bool,
}

/// The page token after the best checkpoint (the steps follow from the top).
const AFTER_BEST: &str = "best";

async fn kept(ctx: &Context, who: &Principal, id: &str) -> Result<Kept, Status> {
    let training = super::caller::visible_training(ctx, who, "training_id", id).await?;
    let (best, steps): (Vec<_>, Vec<_>) = ctx
        .db
        .checkpoints(id)
        .await
        .map_err(ApiError::from)?
        .into_iter()
        .partition(|c| c.best);
    let keep = training.config.checkpoint_keep().max(1) as usize;
    Ok(Kept {
        steps: steps.into_iter().rev().take(keep).collect(),
        best: best.into_iter().next(),
        storage: training.config.checkpoint_storage().map(str::to_string),
        team: training.team.clone(),
        program: training.config.program().is_some(),
    })
}

pub async fn list(
    ctx: &Context,
    who: &Principal,
    req: v1::ListCheckpointsRequest,
) -> Result<v1::ListCheckpointsResponse, Status> {
    let limit = page_size(req.page_size)? as usize;
    // The best checkpoint comes first, then the steps newest first; the
    // token is the step of the last step checkpoint of the previous page
    // (or AFTER_BEST).
    let (with_best, before): (bool, i64) = match req.page_token.as_str() {
        "" => (true, i64::MAX),
        AFTER_BEST => (false, i64::MAX),
        token => (
            false,
            token.parse().map_err(|_| {
                ApiError::field_with(
                    Reason::InvalidPageToken,
                    "page_token",
                    "not a token this server issued",
                )
            })?,
        ),
    };
    let kept = kept(ctx, who, &req.training_id).await?;
    let page: Vec<CheckpointRecord> = kept
        .best
        .filter(|_| with_best)
        .into_iter()
        .chain(kept.steps.into_iter().filter(|c| c.step < before))
        .take(limit + 1)
        .collect();
    let next_page_token = match page.get(limit.wrapping_sub(1)) {
        Some(last) if page.len() > limit && last.best => AFTER_BEST.to_string(),
        Some(last) if page.len() > limit => last.step.to_string(),
        _ => String::new(),
    };
    let checkpoints = page
        .into_iter()
        .take(limit)
        .map(|c| v1::Checkpoint {
            training_id: c.training_id,
            attempt: c.attempt,
            step: c.step,
            path: c.path,
            agent_id: c.agent_id,
            create_time: Some(super::convert::timestamp(c.create_time)),
            best: c.best,
        })
        .collect();
    Ok(v1::ListCheckpointsResponse {
        checkpoints,
        next_page_token,
    })
}

fn export_status(training_id: &str, step: i64, error: ExportError) -> Status {
    ApiError::from(ExportFailure {
        training_id: training_id.to_string(),
        step,
        error,
    })
    .into()
}

pub async fn download(
    ctx: &Context,
    who: &Principal,
    req: v1::DownloadCheckpointRequest,
) -> Result<ChunkStream, Status> {
    let format = v1::CheckpointFormat::try_from(req.format)
        .map_err(|_| ApiError::field("format", format!("unknown format {}", req.format)))?;
    if req.best && req.step.is_some() {
        return Err(ApiError::field("best", "give step or best, not both").into());
    }
    let kept = kept(ctx, who, &req.training_id).await?;
    if kept.program && format == v1::CheckpointFormat::Saelens {
        return Err(ApiError::field(
            "format",
            "a program's checkpoint downloads in its native format only (the directory as written)",
        )
        .into());
    }
    let (program, team) = (kept.program, kept.team.clone());
    let checkpoint = choose(&req, kept.steps, kept.best)?;
    let (id, step) = (req.training_id.clone(), checkpoint.step);
    let source = open(
        ctx,
        who,
        &checkpoint,
        &id,
        kept.storage.as_deref(),
        &team,
        program,
    )
    .await
    .map_err(|e| export_status(&id, step, e))?;
    // Checked before the stream starts, so a missing file is a status, not a
    // broken stream.
    let what = if program {
        let files = source
            .list()
            .await
            .map_err(|e| export_status(&id, step, e))?;
        Files::Program(files)
    } else {
        source
            .size(MANIFEST)
            .await
            .map_err(|e| export_status(&id, step, e))?;
        Files::Sae(format)
    };
    record_download(ctx, who, &id, &team, &checkpoint, format).await;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        if let Err(e) = send_files(&source, what, step, &tx).await {
            let _ = tx.send(Err(export_status(&id, step, e))).await;
        }
    });
    Ok(ctx.until_stopping(ReceiverStream::new(rx)))
}

/// The checkpoint the request names: the best, a step, or the newest.
fn choose(
    req: &v1::DownloadCheckpointRequest,
    steps: Vec<CheckpointRecord>,
    best: Option<CheckpointRecord>,
) -> Result<CheckpointRecord, ApiError> {
    let chosen = match (req.best, req.step) {
        (true, _) => best,
        (false, None) => steps.into_iter().next(),
        (false, Some(step)) => steps.into_iter().find(|c| c.step == step),
    };
    chosen.ok_or_else(|| {
        let what = match (req.best, req.step) {
            (true, _) => "no best checkpoint (it needs [validation])".to_string(),
            (false, None) => "no complete checkpoint".to_string(),
            (false, Some(s)) => format!("no complete checkpoint at step {s}"),
        };
        ApiError::CheckpointNotFound {
            training_id: req.training_id.clone(),
            what,
        }
    })
}

/// A program's checkpoint on the disk of the agent that recorded it,
/// streamed to `caller` (another agent of its gang, resuming from it):
/// listed before the stream starts, so a checkpoint that is gone is a
/// status, not a broken stream. `on_chunk` runs as each chunk goes out.
pub(crate) async fn stream_program_checkpoint(
    ctx: &Context,
    checkpoint: &CheckpointRecord,
    caller: &str,
    on_chunk: impl Fn() + Send + 'static,
) -> Result<ChunkStream, Status> {
    let (id, step) = (checkpoint.training_id.clone(), checkpoint.step);
    let holder = Holder {
        fleet: &ctx.fleet,
        agent_id: &checkpoint.agent_id,
        caller,
    };
    let source = Source::open(&checkpoint.path, false, holder, None, Layout::Program)
        .await
        .map_err(|e| export_status(&id, step, e))?;
    let files = source
        .list()
        .await
        .map_err(|e| export_status(&id, step, e))?;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        if let Err(e) = send_files(&source, Files::Program(files), step, &tx).await {
            let _ = tx.send(Err(export_status(&id, step, e))).await;
        }
    });
    let chunks = tokio_stream::StreamExt::map(ReceiverStream::new(rx), move |chunk| {
        on_chunk();
        chunk
    });
    Ok(ctx.until_stopping(chunks))
}

/// Where the checkpoint's files are read from: shared storage under its
/// configured root and the training's id (never at a path an agent
/// reported), else the agent that holds it.
async fn open(
    ctx: &Context,
    who: &Principal,
    checkpoint: &CheckpointRecord,
    id: &str,
    storage: Option<&str>,
    team: &str,
    program: bool,
) -> Result<Source, ExportError> {
    let step = checkpoint.step;
    let location = match storage {
        Some(storage) => crate::export::source::in_storage(
            storage,
            id,
            &checkpoint.path,
            checkpoint.best,
            step,
        )
        .inspect_err(|e| {
            tracing::warn!(training_id = %id, step, error = %e, "refusing a misplaced checkpoint");
        })?,
        None => checkpoint.path.clone(),
    };
    let env = ctx.storage_env.get(team).map(Vec::as_slice);
    let (kind, actor, _) = who.actor();
    let caller = format!("{kind}:{actor}");
    let holder = Holder {
        fleet: &ctx.fleet,
        agent_id: &checkpoint.agent_id,
        caller: &caller,
    };
    let layout = if program {
        Layout::Program
    } else {
        Layout::Sae
    };
    Source::open(&location, storage.is_some(), holder, env, layout).await
}

/// Who took a team's weights is on the record (folded per minute like the
/// other non-change rows).
async fn record_download(
    ctx: &Context,
    who: &Principal,
    id: &str,
    team: &str,
    checkpoint: &CheckpointRecord,
    format: v1::CheckpointFormat,
) {
    let noted = format!(
        "step {}{}, {}",
        checkpoint.step,
        if checkpoint.best { " (best)" } else { "" },
        format.as_str_name()
    );
    let method = "cohort.v1.TrainingService/DownloadCheckpoint";
    ctx.auth
        .record(crate::model::AuditEntry::ok(who, method, id, team).with("OK", noted))
        .await;
}

type Sender = tokio::sync::mpsc::Sender<Result<v1::CheckpointChunk, Status>>;

/// The largest manifest the coordinator reads into memory (a manifest is a
/// few KiB; its file comes from an agent's disk or shared storage).
const MAX_MANIFEST_BYTES: u64 = 16 << 20;
/// The largest state file the coordinator converts for SAELens (it holds
/// the weights and their transposes in memory); larger ones download in
/// the native format, which is streamed.
const MAX_CONVERTED_STATE_BYTES: u64 = 4 << 30;

/// Refuses a file larger than `cap` before it is read.
fn within(file: &str, size: u64, cap: u64) -> Result<(), ExportError> {
    if size > cap {
        return Err(ExportError::Malformed(format!(
            "{file} holds {size} bytes, more than the {cap} the coordinator reads to convert it; download the native format"
        )));
    }
    Ok(())
}

/// What a download sends.
enum Files {
    /// The SAE's checkpoint, natively or converted.
    Sae(v1::CheckpointFormat),
    /// A program's files as listed, relative to its checkpoint directory.
    Program(Vec<String>),
}

async fn send_files(
    source: &Source,
    what: Files,
    step: i64,
    tx: &Sender,
) -> Result<(), ExportError> {
    let format = match what {
        Files::Sae(format) => format,
        Files::Program(files) => {
            for file in files {
                send_file(source, &file, step, tx).await?;
            }
            return Ok(());
        }
    };
    match format {
        v1::CheckpointFormat::Unspecified | v1::CheckpointFormat::Native => {
            for file in [MANIFEST, STATE] {
                send_file(source, file, step, tx).await?;
            }
        }
        v1::CheckpointFormat::Saelens => {
            let scratch = tempfile::tempdir()
                .map_err(|e| ExportError::Storage(format!("a scratch directory: {e}")))?;
            let state = scratch.path().join(STATE);
            within(STATE, source.size(STATE).await?, MAX_CONVERTED_STATE_BYTES)?;
            let manifest_size = source.size(MANIFEST).await?;
            within(MANIFEST, manifest_size, MAX_MANIFEST_BYTES)?;
            source.copy_to(STATE, &state).await?;
            let manifest = source.read(MANIFEST, 0, manifest_size as usize).await?;
            let manifest = Manifest::parse(&manifest)
                .map_err(|e| ExportError::Malformed(format!("{MANIFEST}: {e}")))?;
            let out = scratch.path().to_path_buf();
            tokio::task::spawn_blocking(move || saelens::convert(&state, &manifest, &out))
                .await
                .map_err(|e| ExportError::Storage(format!("conversion task: {e}")))??;
            let converted = Source::local(scratch.path())?;
            for file in [saelens::CFG, saelens::WEIGHTS] {
                send_file(&converted, file, step, tx).await?;
            }
        }
    }
    Ok(())
}

/// Stream one file in chunks; stops quietly when the client went away.
async fn send_file(source: &Source, file: &str, step: i64, tx: &Sender) -> Result<(), ExportError> {
    let size = source.size(file).await?;
    let mut offset = 0;
    loop {
        let n = (size - offset).min(CHUNK as u64) as usize;
        let data = source.read(file, offset, n).await?;
        let chunk = v1::CheckpointChunk {
            file: file.to_string(),
            offset,
            file_size: size,
            data,
            step,
        };
        if tx.send(Ok(chunk)).await.is_err() {
            return Ok(());
        }
        offset += n as u64;
        if offset >= size {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_past_their_cap_are_refused_before_they_are_read() {
        assert!(within(MANIFEST, 4096, MAX_MANIFEST_BYTES).is_ok());
        let err = within(MANIFEST, MAX_MANIFEST_BYTES + 1, MAX_MANIFEST_BYTES).unwrap_err();
        assert!(
            err.to_string().contains("download the native format"),
            "{err}"
        );
        assert!(within(STATE, 5 << 30, MAX_CONVERTED_STATE_BYTES).is_err());
    }
}
