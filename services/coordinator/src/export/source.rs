//! Where a checkpoint's files are: a directory the coordinator can read
//! (shared storage, or a single-host setup), an S3 prefix (object_store,
//! configured from the coordinator's own AWS_* environment variables), or a
//! directory on the disk of the agent that holds it, read through its
//! Connect stream.

use super::ExportError;
use crate::fleet::{FileRef, Fleet, RelayError};
use cohort_spec::checkpoint::{step_of, BEST_DIR, MANIFEST_FILE};
use cohort_spec::location::Location;
use cohort_storage::Objects;
use std::path::Path;
use tokio::io::AsyncWriteExt;

/// Where a checkpoint in shared storage is read: under the training's
/// configured `storage`, in the training's own directory
/// (`<storage>/<training id>/`), by the last segment of the reported path,
/// which must name the checkpoint itself (`best`, or `step-N` of its step).
/// Nothing else of what a rank or its agent reported is used, so a
/// download never reads a path an agent chose. A relative local `storage`
/// was resolved by the rank against its run dir: the reported path must
/// then end with `<storage>/<training id>/<name>` and hold no `..`.
pub fn in_storage(
    storage: &str,
    training_id: &str,
    reported: &str,
    best: bool,
    step: i64,
) -> Result<String, ExportError> {
    let reported = reported.trim_end_matches('/');
    let name = reported.rsplit('/').next().unwrap_or_default();
    let own = if best {
        name == BEST_DIR
    } else {
        step_of(name) == Some(step)
    };
    let misplaced = || {
        ExportError::Malformed(format!(
            "checkpoint {} of training {training_id} was reported at {reported}, outside {storage}/{training_id}/",
            if best { "best".to_string() } else { format!("step {step}") }
        ))
    };
    if !own {
        return Err(misplaced());
    }
    let base = storage.trim_end_matches('/');
    let relative = match Location::parse(base).map_err(ExportError::Malformed)? {
        Location::Local(dir) if !dir.is_absolute() => Some(dir),
        _ => None,
    };
    if let Some(local) = relative {
        let local = local.to_string_lossy();
        let tail = format!("/{}/{training_id}/{name}", local.trim_start_matches("./"));
        let escapes = reported.split('/').any(|part| part == "..");
        return if reported.ends_with(&tail) && !escapes {
            Ok(reported.to_string())
        } else {
            Err(misplaced())
        };
    }
    Ok(format!("{base}/{training_id}/{name}"))
}

/// Per team, the variables (AWS_*) its checkpoint storage is read with.
pub type TeamEnv = std::collections::HashMap<String, Vec<(String, String)>>;

pub enum Source {
    /// Shared storage this coordinator reads itself (a directory or an S3
    /// prefix), or a directory of its own (a converted checkpoint).
    Storage(Objects),
    /// A program's checkpoint directory this coordinator reads itself,
    /// files below it only ([`super::tree`]).
    Tree(std::path::PathBuf),
    /// A directory on the disk of the agent that holds it.
    Agent {
        fleet: Fleet,
        agent_id: String,
        /// Who the reads are for (the relay bounds each caller's share).
        caller: String,
        dir: String,
    },
}

/// How a checkpoint's files are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// The SAE's: its manifest and state file.
    Sae,
    /// A program's directory, as written.
    Program,
}

/// The agent that holds a checkpoint on its disk, and who reads it.
#[derive(Clone, Copy)]
pub struct Holder<'a> {
    pub fleet: &'a Fleet,
    pub agent_id: &'a str,
    /// Who the reads are for (the relay bounds each caller's share).
    pub caller: &'a str,
}

impl Source {
    /// The source of a checkpoint reported at `location` (a directory or an
    /// `s3://bucket/key` URI) by a rank on agent `holder`. A checkpoint in
    /// shared storage is read directly; one on its agent's disk (no
    /// `checkpoint.storage`) through that agent while it is connected, else
    /// directly when this host happens to see it (the SAE's manifest, a
    /// program's directory).
    pub async fn open(
        location: &str,
        shared: bool,
        holder: Holder<'_>,
        env: Option<&[(String, String)]>,
        layout: Layout,
    ) -> Result<Self, ExportError> {
        let at = Location::parse(location).map_err(ExportError::Malformed)?;
        let dir = match at {
            Location::S3 { .. } => {
                let objects = Objects::open(&at, env).map_err(ExportError::Storage)?;
                return Ok(Source::Storage(objects));
            }
            Location::Local(dir) => dir,
        };
        if !shared && holder.fleet.is_connected(holder.agent_id) {
            return Ok(Source::Agent {
                fleet: holder.fleet.clone(),
                agent_id: holder.agent_id.to_string(),
                caller: holder.caller.to_string(),
                dir: location.to_string(),
            });
        }
        let here = match layout {
            Layout::Sae => tokio::fs::metadata(dir.join(MANIFEST_FILE))
                .await
                .is_ok_and(|m| m.is_file()),
            Layout::Program => tokio::fs::metadata(&dir).await.is_ok_and(|m| m.is_dir()),
        };
        match (here, layout) {
            (true, Layout::Sae) => Self::local(&dir),
            (true, Layout::Program) => Ok(Source::Tree(dir)),
            (false, _) if shared => Err(ExportError::Storage(format!(
                "{location}: not readable from the coordinator's host (mount the shared storage there)"
            ))),
            (false, _) => Err(ExportError::Unreachable(location.to_string())),
        }
    }

    /// The files of a program's checkpoint, relative to its directory.
    pub async fn list(&self) -> Result<Vec<String>, ExportError> {
        match self {
            Source::Tree(dir) => super::tree::list(dir).await,
            Source::Agent {
                fleet,
                agent_id,
                caller,
                dir,
            } => {
                let (data, _) = fleet
                    .read_file(agent_id, caller, FileRef::Listing(dir.clone()), 0, 0)
                    .await
                    .map_err(|e| relay_error(dir, e))?;
                let text = String::from_utf8(data).map_err(|_| {
                    ExportError::Malformed(format!("{dir}: a listing that is not text"))
                })?;
                let files: Vec<String> = text.lines().map(str::to_string).collect();
                // The agent lists plain relative names; anything else is refused.
                match files
                    .iter()
                    .find(|f| !cohort_storage::tree::is_plain_relative(f))
                {
                    Some(bad) => Err(ExportError::Malformed(format!(
                        "{dir}: the agent listed {bad:?}"
                    ))),
                    None => Ok(files),
                }
            }
            Source::Storage(objects) => {
                let files = objects
                    .list(super::tree::MAX_FILES)
                    .await
                    .map_err(ExportError::Storage)?;
                match files
                    .iter()
                    .find(|f| !cohort_storage::tree::is_plain_relative(f))
                {
                    Some(bad) => Err(ExportError::Malformed(format!("an object named {bad:?}"))),
                    None => Ok(files),
                }
            }
        }
    }

    /// A directory on this coordinator's host.
    pub fn local(dir: &Path) -> Result<Self, ExportError> {
        Objects::open(&Location::Local(dir.to_path_buf()), None)
            .map(Source::Storage)
            .map_err(ExportError::Storage)
    }

    pub async fn size(&self, file: &str) -> Result<u64, ExportError> {
        match self {
            Source::Agent {
                fleet,
                agent_id,
                caller,
                dir,
            } => fleet
                .read_file(
                    agent_id,
                    caller,
                    FileRef::Path(format!("{dir}/{file}")),
                    0,
                    0,
                )
                .await
                .map(|(_, size)| size)
                .map_err(|e| relay_error(dir, e)),
            Source::Storage(objects) => objects.size(file).await.map_err(ExportError::Storage),
            Source::Tree(dir) => super::tree::size(dir, file).await,
        }
    }

    /// `len` bytes of `file` from `offset`.
    pub async fn read(&self, file: &str, offset: u64, len: usize) -> Result<Vec<u8>, ExportError> {
        match self {
            Source::Agent {
                fleet,
                agent_id,
                caller,
                dir,
            } => {
                let path = format!("{dir}/{file}");
                let mut out = Vec::with_capacity(len);
                while out.len() < len {
                    let want = (len - out.len()).min(CHUNK) as u32;
                    let (data, _) = fleet
                        .read_file(
                            agent_id,
                            caller,
                            FileRef::Path(path.clone()),
                            offset + out.len() as u64,
                            want,
                        )
                        .await
                        .map_err(|e| relay_error(dir, e))?;
                    if data.is_empty() {
                        return Err(ExportError::Storage(format!(
                            "{path}: the file ended early"
                        )));
                    }
                    out.extend_from_slice(&data);
                }
                Ok(out)
            }
            Source::Storage(objects) => objects
                .read(file, offset, len)
                .await
                .map_err(ExportError::Storage),
            Source::Tree(dir) => super::tree::read(dir, file, offset, len).await,
        }
    }

    /// Copy `file` to the local path `to`, a megabyte at a time.
    pub async fn copy_to(&self, file: &str, to: &Path) -> Result<(), ExportError> {
        let size = self.size(file).await?;
        let mut out = tokio::fs::File::create(to)
            .await
            .map_err(|e| ExportError::Storage(format!("{}: {e}", to.display())))?;
        let mut offset = 0;
        while offset < size {
            let n = (size - offset).min(CHUNK as u64) as usize;
            let part = self.read(file, offset, n).await?;
            out.write_all(&part)
                .await
                .map_err(|e| ExportError::Storage(format!("{}: {e}", to.display())))?;
            offset += n as u64;
        }
        out.flush()
            .await
            .map_err(|e| ExportError::Storage(format!("{}: {e}", to.display())))
    }
}

/// An agent that went away mid-download makes the checkpoint unreachable;
/// anything else is the storage failing.
fn relay_error(dir: &str, e: RelayError) -> ExportError {
    match e {
        RelayError::NotConnected(_) => ExportError::Unreachable(dir.to_string()),
        e => ExportError::Storage(format!("{dir}: {e}")),
    }
}

/// Bytes per streamed chunk.
pub const CHUNK: usize = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downloads_read_only_the_training_s_own_directory_in_its_storage() {
        let ok = |storage, reported, best, step| in_storage(storage, "trn-1", reported, best, step);
        assert_eq!(
            ok("s3://b/runs/", "s3://b/runs/trn-1/step-00000040", false, 40).unwrap(),
            "s3://b/runs/trn-1/step-00000040"
        );
        // Whatever directory the agent reported, the storage's is read.
        assert_eq!(
            ok("/shared/ckpt", "/etc/secrets/step-40", false, 40).unwrap(),
            "/shared/ckpt/trn-1/step-40"
        );
        assert_eq!(
            ok("file:///shared", "/x/best", true, 7).unwrap(),
            "file:///shared/trn-1/best"
        );
        assert!(
            ok("/shared", "/shared/trn-1/step-41", false, 40).is_err(),
            "another step"
        );
        let manifest = format!("/shared/trn-1/{MANIFEST_FILE}");
        assert!(ok("/shared", &manifest, false, 40).is_err());
        // Relative storage: the reported path must end in the training's own directory.
        assert!(ok(
            "ckpt",
            "/w/trainings/trn-1/run/ckpt/trn-1/step-40",
            false,
            40
        )
        .is_ok());
        assert!(ok(
            "ckpt",
            "/w/trainings/trn-2/run/ckpt/trn-2/step-40",
            false,
            40
        )
        .is_err());
        assert!(ok("ckpt", "/w/../../ckpt/trn-1/step-40", false, 40).is_err());
    }
}
