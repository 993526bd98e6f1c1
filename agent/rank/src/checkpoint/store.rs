//! Where rank 0 writes checkpoints and every restart looks for them
//! (`checkpoint.storage`): the run dir (default), a shared path, or S3.

use super::local::{self, checkpoints_dir};
use super::object::Prefix;
use super::{restore_file, step_dir_name, Corrupt, Manifest, BEST_DIR, STATE_FILE};
use crate::error::RankError;
use crate::state::TrainState;
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
    /// Its directory name: `step-NNNNNNNN` or `best`.
    dir: String,
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
            Location::Local(dir) => {
                // Checked again here, links resolved (the agent checked the
                // config's path before the rank started).
                cohort_spec::roots::DataRoots::from_env()
                    .and_then(|roots| roots.check(&dir.display().to_string(), run_dir))
                    .map_err(|e| {
                        RankError::Data(format!("DATA_OUTSIDE_ROOTS: checkpoint.storage: {e}"))
                    })?;
                Store::Local(dir)
            }
            Location::S3 { bucket, key } => {
                crate::storage::s3::allowed(&bucket, &key)
                    .map_err(|e| RankError::Data(format!("checkpoint.storage: {e}")))?;
                Store::S3(Prefix { bucket, key })
            }
        })
    }

    /// Write a checkpoint of step `manifest.step`; returns where it is.
    /// `run_dir` serves as scratch space for uploads.
    pub fn save(
        &self,
        run_dir: &Path,
        state: &TrainState,
        manifest: &Manifest,
    ) -> Result<String, RankError> {
        self.save_as(run_dir, &step_dir_name(manifest.step), state, manifest)
    }

    /// Write `state` as the best checkpoint (`best/`, replacing the last).
    pub fn save_best(
        &self,
        run_dir: &Path,
        state: &TrainState,
        manifest: &Manifest,
    ) -> Result<String, RankError> {
        self.save_as(run_dir, BEST_DIR, state, manifest)
    }

    fn save_as(
        &self,
        run_dir: &Path,
        dir: &str,
        state: &TrainState,
        manifest: &Manifest,
    ) -> Result<String, RankError> {
        match self {
            Store::Local(root) => Ok(local::save_as(root, dir, state, manifest)?
                .display()
                .to_string()),
            Store::S3(prefix) => prefix.save_as(run_dir, dir, state, manifest),
        }
    }

    /// Keep the newest `keep` complete checkpoints (`best/` is apart).
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

    /// Complete step checkpoints, newest first.
    pub fn candidates(&self) -> Result<Vec<Found>, RankError> {
        match self {
            Store::Local(root) => Ok(local::list_root(root)
                .into_iter()
                .rev()
                .map(|l| Found {
                    dir: step_dir_name(l.manifest.step),
                    manifest: l.manifest,
                    location: l.dir.display().to_string(),
                })
                .collect()),
            Store::S3(prefix) => {
                let mut found = Vec::new();
                for step in prefix.complete_steps()?.into_iter().rev() {
                    let dir = step_dir_name(step);
                    if let Some(manifest) = prefix.manifest(&dir)? {
                        found.push(Found {
                            manifest,
                            location: prefix.uri(step),
                            dir,
                        });
                    }
                }
                Ok(found)
            }
        }
    }

    /// The newest complete checkpoint, if any.
    pub fn latest(&self) -> Result<Option<Found>, RankError> {
        Ok(self.candidates()?.into_iter().next())
    }

    /// The best checkpoint's manifest, if there is one.
    pub fn best(&self) -> Result<Option<Manifest>, RankError> {
        match self {
            Store::Local(root) => Ok(local::load(root.join(BEST_DIR)).map(|l| l.manifest)),
            Store::S3(prefix) => prefix.manifest(BEST_DIR),
        }
    }

    /// Load `found` into `state`, verified against its manifest; a
    /// [`Corrupt`] checkpoint leaves `state` to be loaded from another.
    pub fn restore(
        &self,
        found: &Found,
        run_dir: &Path,
        state: &mut TrainState,
    ) -> Result<Result<(), Corrupt>, RankError> {
        match self {
            Store::Local(_) => {
                let path = Path::new(&found.location).join(STATE_FILE);
                restore_file(&path, &found.location, &found.manifest, state)
            }
            Store::S3(prefix) => {
                std::fs::create_dir_all(run_dir).map_err(|e| super::io("create", run_dir, e))?;
                let local = run_dir.join(format!(".restore-{}", found.dir));
                // A download that fails is the store's trouble (retried by a
                // restart), not a corrupt checkpoint.
                let result = prefix
                    .download_state(&found.dir, &local)
                    .and_then(|()| restore_file(&local, &found.location, &found.manifest, state));
                let _ = std::fs::remove_file(&local);
                result
            }
        }
    }
}
