//! A program's checkpoints in object storage (`checkpoint.storage =
//! "s3://bucket/prefix"`): the program still writes `step-<N>/` directories
//! into its local `COHORT_CHECKPOINT_DIR`; the agent of rank 0 uploads each
//! complete one to `<prefix>/<training id>/step-<N>/` before reporting it
//! (so a recorded checkpoint is whole in the bucket), prunes the bucket to
//! `keep`, and on a restart every agent of the gang downloads the newest
//! recorded one before its ranks start. The agent works in the bucket with
//! the team's credentials (its env file) and within the team's prefixes,
//! never with its own.
//!
//! Blocking: callers run it off the async runtime.
#![allow(clippy::disallowed_methods)]

use cohort_spec::checkpoint::{step_dir_name, step_of};
use cohort_spec::location::{join_key, s3_uri};
use cohort_spec::prefixes::S3Prefixes;
use cohort_storage::s3::Bucket;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The most files of one checkpoint the agent uploads or downloads.
pub const MAX_FILES: usize = 10_000;

/// Where a training's checkpoints go in a bucket, and as whom.
#[derive(Clone, PartialEq, Eq)]
pub struct RemoteSpec {
    pub bucket: String,
    /// `<prefix>/<training id>`, no trailing `/`.
    pub key: String,
    /// The team's variables (AWS_* among them).
    pub env: Vec<(String, String)>,
    pub prefixes: S3Prefixes,
}

impl std::fmt::Debug for RemoteSpec {
    /// Without the credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteSpec")
            .field("at", &s3_uri(&self.bucket, &self.key))
            .finish_non_exhaustive()
    }
}

/// The bucket side of a training's checkpoints.
pub struct Remote {
    bucket: Bucket,
    name: String,
    key: String,
}

impl Remote {
    pub fn open(spec: &RemoteSpec) -> Result<Self, String> {
        let bucket = Bucket::for_team(&spec.bucket, &spec.env, spec.prefixes.clone())?;
        Ok(Self {
            bucket,
            name: spec.bucket.clone(),
            key: spec.key.clone(),
        })
    }

    /// Uploads the complete local checkpoint `dir` of `step`; returns its URI.
    pub fn upload(&self, step: i64, dir: &Path) -> Result<String, String> {
        let entry = join_key(&self.key, &step_dir_name(step));
        let files = cohort_storage::tree::list_files(dir, MAX_FILES)
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        for file in &files {
            let source = cohort_storage::tree::open_within(dir, file)
                .map_err(|e| format!("{}/{file}: {e}", dir.display()))?;
            self.bucket.upload(&join_key(&entry, file), source)?;
        }
        Ok(s3_uri(&self.name, &entry))
    }

    /// The checkpoints in the bucket: step -> the keys of its objects.
    fn steps(&self) -> Result<BTreeMap<i64, Vec<String>>, String> {
        let mut steps: BTreeMap<i64, Vec<String>> = BTreeMap::new();
        let prefix = format!("{}/", self.key);
        for (key, _) in self.bucket.list(&self.key, true)? {
            let Some(rest) = key.strip_prefix(&prefix) else {
                continue;
            };
            let Some(step) = rest.split('/').next().and_then(step_of) else {
                continue;
            };
            steps.entry(step).or_default().push(key);
        }
        Ok(steps)
    }

    /// Removes all but the newest `keep` checkpoints from the bucket.
    pub fn prune(&self, keep: usize) -> Result<(), String> {
        let steps = self.steps()?;
        let excess = steps.len().saturating_sub(keep.max(1));
        for (step, keys) in steps.into_iter().take(excess) {
            for key in keys {
                self.bucket.delete(&key)?;
            }
            tracing::info!(step, "removed a checkpoint beyond keep from the bucket");
        }
        Ok(())
    }

    /// Downloads checkpoint `step` into `into/step-<N>` (replacing what was
    /// there); `None` when the bucket does not hold it.
    pub fn fetch(&self, step: i64, into: &Path) -> Result<Option<PathBuf>, String> {
        let Some(keys) = self.steps()?.remove(&step) else {
            return Ok(None);
        };
        let entry = format!("{}/", join_key(&self.key, &step_dir_name(step)));
        let dest = into.join(step_dir_name(step));
        let fail = |e: std::io::Error| format!("{}: {e}", dest.display());
        if dest.exists() {
            std::fs::remove_dir_all(&dest).map_err(fail)?;
        }
        for key in keys {
            let relative = key.strip_prefix(&entry).unwrap_or_default();
            if !cohort_storage::tree::is_plain_relative(relative) {
                return Err(format!(
                    "{}: an object named {key:?}",
                    s3_uri(&self.name, &entry)
                ));
            }
            let path = dest.join(relative);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(fail)?;
            }
            let mut out = std::fs::File::create(&path).map_err(fail)?;
            self.bucket.download(&key, &mut out)?;
        }
        Ok(Some(dest))
    }
}
