//! Where rank 0 writes checkpoints and every restart looks for them
//! (`checkpoint.storage`): the run dir (default), a shared path, or S3.

use super::local::{self, checkpoints_dir};
use super::object::Prefix;
use super::{restore_file, step_dir_name, Manifest, STATE_FILE};
use crate::error::RankError;
use crate::model::{Adam, Sae};
use crate::storage::Location;
use std::path::{Path, PathBuf};

pub enum Store {
    Local(PathBuf),
    S3(Prefix),
}

/// A complete checkpoint, found in a store.
pub struct Found {
    pub manifest: Manifest,
    /// A local directory or an `s3://` URI.
    pub location: String,
}

impl Store {
    /// The store for `storage` (None: the run dir). Shared storage keeps each
    /// training apart under its id (`COHORT_JOB_ID`, set by the agent; the
    /// run dir's name when run by hand).
    pub fn new(storage: Option<&str>, run_dir: &Path) -> Result<Self, RankError> {
        let Some(uri) = storage else {
            return Ok(Store::Local(checkpoints_dir(run_dir)));
        };
        let training = std::env::var("COHORT_JOB_ID").ok().unwrap_or_else(|| {
            run_dir
                .file_name()
                .map_or_else(|| "run".into(), |n| n.to_string_lossy().into_owned())
        });
        let location = Location::parse(uri)
            .map_err(|e| {
                RankError::Config(cohort_spec::ConfigError::Invalid {
                    field: "checkpoint.storage".into(),
                    reason: e,
                })
            })?
            .join(&training);
        Ok(match location {
            Location::Local(dir) => Store::Local(dir),
            Location::S3 { bucket, key } => Store::S3(Prefix { bucket, key }),
        })
    }

    /// Write a checkpoint; returns where it is. `run_dir` serves as scratch
    /// space for uploads.
    pub fn save(
        &self,
        run_dir: &Path,
        sae: &Sae,
        adam: &Adam,
        manifest: &Manifest,
    ) -> Result<String, RankError> {
        match self {
            Store::Local(root) => Ok(local::save(root, sae, adam, manifest)?
                .display()
                .to_string()),
            Store::S3(prefix) => prefix.save(run_dir, sae, adam, manifest),
        }
    }

    /// Keep the newest `keep` complete checkpoints.
    pub fn prune(&self, keep: usize) -> Result<(), RankError> {
        match self {
            Store::Local(root) => local::prune(root, keep),
            Store::S3(prefix) => {
                let steps = prefix.complete_steps()?;
                let excess = steps.len().saturating_sub(keep);
                for step in &steps[..excess] {
                    prefix.delete(*step)?;
                }
                Ok(())
            }
        }
    }

    /// The newest complete checkpoint, if any.
    pub fn latest(&self) -> Result<Option<Found>, RankError> {
        match self {
            Store::Local(root) => Ok(local::list_root(root).pop().map(|l| Found {
                manifest: l.manifest,
                location: l.dir.display().to_string(),
            })),
            Store::S3(prefix) => {
                for step in prefix.complete_steps()?.into_iter().rev() {
                    if let Some(manifest) = prefix.manifest(step)? {
                        return Ok(Some(Found {
                            manifest,
                            location: prefix.uri(step),
                        }));
                    }
                }
                Ok(None)
            }
        }
    }

    /// Load `found` into `sae` and `adam`.
    pub fn restore(
        &self,
        found: &Found,
        run_dir: &Path,
        sae: &mut Sae,
        adam: &mut Adam,
    ) -> Result<(), RankError> {
        match self {
            Store::Local(_) => {
                let path = Path::new(&found.location).join(STATE_FILE);
                restore_file(&path, &found.location, sae, adam)
            }
            Store::S3(prefix) => {
                let step = found.manifest.step;
                std::fs::create_dir_all(run_dir).map_err(|e| super::io("create", run_dir, e))?;
                let local = run_dir.join(format!(".restore-{}", step_dir_name(step)));
                let result = prefix
                    .download_state(step, &local)
                    .and_then(|()| restore_file(&local, &found.location, sae, adam));
                let _ = std::fs::remove_file(&local);
                result
            }
        }
    }
}
