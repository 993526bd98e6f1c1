//! A restarted program's checkpoint, fetched from the agent that holds it.
//!
//! With no shared `checkpoint.storage`, a program's checkpoints are on the
//! disk of rank 0's host. On a restart the agents of the other hosts fetch
//! the newest recorded one (FetchCheckpoint, relayed through the
//! coordinator from the holder) into `<run dir>/resume/step-<N>/` before
//! their ranks start, so `COHORT_RESUME_DIR` names a complete directory on
//! every rank — as they already do from an `s3://` bucket. Bounded: a
//! checkpoint over [`FetchLimits::max_bytes`] is refused once its sizes
//! are known, before it is all copied, and the whole fetch has
//! [`FetchLimits::timeout`]; either fails the start with what to do
//! (shared storage). Files land in a hidden directory renamed into place
//! once complete.

use cohort_proto::v1;
use cohort_proto::v1::agent_service_client::AgentServiceClient;
use cohort_spec::checkpoint::step_dir_name;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// How much, and how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchLimits {
    pub max_bytes: u64,
    pub timeout: Duration,
}

impl Default for FetchLimits {
    fn default() -> Self {
        Self {
            max_bytes: 16 << 30,
            timeout: Duration::from_secs(600),
        }
    }
}

/// The way to the coordinator of the current session, and who we are there.
#[derive(Debug, Clone)]
pub struct PeerLink {
    pub channel: tonic::transport::Channel,
    pub agent_id: String,
}

/// Fetches checkpoint `step` of `training_id` into `into/step-<N>/`
/// (replacing what was there); returns that directory.
pub async fn fetch(
    link: &PeerLink,
    training_id: &str,
    step: i64,
    into: &Path,
    limits: FetchLimits,
) -> Result<PathBuf, String> {
    let dest = into.join(step_dir_name(step));
    let staging = into.join(format!(".{}.fetching", step_dir_name(step)));
    let fetched = tokio::time::timeout(
        limits.timeout,
        fetch_into(link, training_id, step, &staging, limits.max_bytes),
    )
    .await
    .unwrap_or_else(|_| {
        Err(format!(
            "not done within {} s (--resume-fetch-timeout)",
            limits.timeout.as_secs()
        ))
    });
    let placed = match fetched {
        Ok(bytes) => place(&staging, &dest).await.map(|()| bytes),
        Err(e) => Err(e),
    };
    match placed {
        Ok(bytes) => {
            tracing::info!(training = training_id, step, bytes, dir = %dest.display(), "fetched the checkpoint to resume from");
            Ok(dest)
        }
        Err(e) => {
            let _ = tokio::fs::remove_dir_all(&staging).await;
            Err(e)
        }
    }
}

async fn place(staging: &Path, dest: &Path) -> Result<(), String> {
    if tokio::fs::metadata(dest).await.is_ok() {
        tokio::fs::remove_dir_all(dest)
            .await
            .map_err(|e| format!("{}: {e}", dest.display()))?;
    }
    tokio::fs::rename(staging, dest)
        .await
        .map_err(|e| format!("{}: {e}", dest.display()))
}

/// The file being written, and how far.
struct Open {
    name: String,
    size: u64,
    written: u64,
    out: tokio::fs::File,
}

/// Streams the checkpoint into `staging`; returns the bytes written.
async fn fetch_into(
    link: &PeerLink,
    training_id: &str,
    step: i64,
    staging: &Path,
    max_bytes: u64,
) -> Result<u64, String> {
    let io = |e: std::io::Error| format!("{}: {e}", staging.display());
    if tokio::fs::metadata(staging).await.is_ok() {
        tokio::fs::remove_dir_all(staging).await.map_err(io)?;
    }
    tokio::fs::create_dir_all(staging).await.map_err(io)?;
    let request = v1::FetchCheckpointRequest {
        agent_id: link.agent_id.clone(),
        training_id: training_id.to_string(),
        step,
    };
    let mut stream = AgentServiceClient::new(link.channel.clone())
        .fetch_checkpoint(request)
        .await
        .map_err(|s| format!("{}: {}", s.code(), s.message()))?
        .into_inner();
    let (mut declared, mut total) = (0u64, 0u64);
    let mut open: Option<Open> = None;
    while let Some(chunk) = stream
        .message()
        .await
        .map_err(|s| format!("{}: {}", s.code(), s.message()))?
    {
        if chunk.step != step || !cohort_storage::tree::is_plain_relative(&chunk.file) {
            return Err(format!(
                "the coordinator sent {:?} of step {}",
                chunk.file, chunk.step
            ));
        }
        if open.as_ref().is_none_or(|o| o.name != chunk.file) {
            finish(open.take()).await?;
            declared += chunk.file_size;
            if declared > max_bytes {
                return Err(format!(
                    "the checkpoint holds at least {declared} bytes, more than --resume-fetch-max-gib ({max_bytes} bytes) lets an agent copy: use shared or s3:// checkpoint.storage"
                ));
            }
            let path = staging.join(&chunk.file);
            if let Some(parent) = path.parent() {
                tokio::fs::create_dir_all(parent).await.map_err(io)?;
            }
            let out = tokio::fs::File::create(&path).await.map_err(io)?;
            open = Some(Open {
                name: chunk.file.clone(),
                size: chunk.file_size,
                written: 0,
                out,
            });
        }
        let file = open.as_mut().expect("opened above");
        let end = chunk.offset.saturating_add(chunk.data.len() as u64);
        if chunk.offset != file.written || chunk.file_size != file.size || end > file.size {
            return Err(format!("{}: a chunk out of order", chunk.file));
        }
        file.out.write_all(&chunk.data).await.map_err(io)?;
        file.written = end;
        total += chunk.data.len() as u64;
    }
    finish(open).await?;
    Ok(total)
}

/// Closes a file once all of it came.
async fn finish(open: Option<Open>) -> Result<(), String> {
    let Some(mut file) = open else {
        return Ok(());
    };
    if file.written != file.size {
        return Err(format!(
            "{}: {} of {} bytes came",
            file.name, file.written, file.size
        ));
    }
    file.out
        .flush()
        .await
        .map_err(|e| format!("{}: {e}", file.name))
}
