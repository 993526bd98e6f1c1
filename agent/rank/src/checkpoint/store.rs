//! Where rank 0 writes checkpoints and every restart looks for them
//! (`checkpoint.storage`): the run dir (default), a shared path, or S3 —
//! one [`Dir`] of the storage crate, so nothing here depends on which.

use super::{restore_file, step_dir_name, Corrupt, Manifest, BEST_DIR, MANIFEST_FILE, STATE_FILE};
use crate::error::RankError;
use crate::state::TrainState;
use cohort_spec::checkpoint::{step_of, CHECKPOINTS_DIR};
use cohort_spec::launch;
use cohort_spec::location::Location;
use cohort_storage::Dir;
use std::path::Path;

/// A checkpoint's files in the order they are published: the manifest
/// last, so a reader that finds it finds the state beside it.
const PUBLISHED: [&str; 2] = [STATE_FILE, MANIFEST_FILE];
/// The order they are removed in: the manifest first.
const REMOVED: [&str; 2] = [MANIFEST_FILE, STATE_FILE];

pub struct Store {
    dir: Dir,
}

/// A complete checkpoint, found in a store.
pub struct Found {
    pub manifest: Manifest,
    /// A local directory or an `s3://` URI.
    pub location: String,
    /// Its directory name: `step-NNNNNNNN` or `best`.
    name: String,
}

fn failed(e: String) -> RankError {
    RankError::Checkpoint(e)
}

/// The newest complete checkpoint in a run dir's default root, if any.
pub fn latest(run_dir: &Path) -> Option<Found> {
    Store::new(None, run_dir).ok()?.latest().ok()?
}

impl Store {
    /// The store for `storage` (None: `<run-dir>/checkpoints`). Shared
    /// storage keeps each training apart under its id (`COHORT_TRAINING_ID`,
    /// set by the agent; the run dir's name when run by hand).
    pub fn new(storage: Option<&str>, run_dir: &Path) -> Result<Self, RankError> {
        let Some(uri) = storage else {
            let dir = Dir::open(Location::Local(run_dir.join(CHECKPOINTS_DIR))).map_err(failed)?;
            return Ok(Store { dir });
        };
        let id = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        let training = id(launch::TRAINING_ID)
            .or_else(|| id(launch::JOB_ID))
            .unwrap_or_else(|| {
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
        if let Some(dir) = location.local() {
            // Checked again here, links resolved (the agent checked the
            // config's path before the rank started).
            cohort_spec::roots::DataRoots::from_env()
                .and_then(|roots| roots.check(&dir.display().to_string(), run_dir))
                .map_err(|e| {
                    RankError::Data(format!("DATA_OUTSIDE_ROOTS: checkpoint.storage: {e}"))
                })?;
        }
        let dir =
            Dir::open(location).map_err(|e| RankError::Data(format!("checkpoint.storage: {e}")))?;
        Ok(Store { dir })
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

    /// Stage the state file and the manifest (with the state's digest),
    /// then publish them as `name`, replacing what was there.
    fn save_as(
        &self,
        run_dir: &Path,
        name: &str,
        state: &TrainState,
        manifest: &Manifest,
    ) -> Result<String, RankError> {
        let staged = self.dir.stage(name, run_dir).map_err(failed)?;
        let digest = super::write_state(&staged.path().join(STATE_FILE), state)?;
        let manifest = Manifest {
            state_sha256: Some(digest),
            ..manifest.clone()
        };
        let path = staged.path().join(MANIFEST_FILE);
        let text = serde_json::to_vec_pretty(&manifest).expect("manifest serialises");
        std::fs::write(&path, text).map_err(|e| super::io("write", &path, e))?;
        self.dir.publish(staged, &PUBLISHED).map_err(failed)
    }

    /// The step directories holding both files, oldest first.
    fn steps(&self) -> Result<Vec<(i64, String)>, RankError> {
        let mut steps: Vec<(i64, String)> = self
            .dir
            .complete(&PUBLISHED)
            .map_err(failed)?
            .into_iter()
            .filter_map(|name| Some((step_of(&name)?, name)))
            .collect();
        steps.sort();
        Ok(steps)
    }

    /// Keep the newest `keep` complete checkpoints (`best/` is apart).
    pub fn prune(&self, keep: usize) -> Result<(), RankError> {
        let steps = self.steps()?;
        let excess = steps.len().saturating_sub(keep);
        for (_, name) in &steps[..excess] {
            self.dir.remove(name, &REMOVED).map_err(failed)?;
        }
        Ok(())
    }

    fn manifest(&self, name: &str) -> Result<Option<Manifest>, RankError> {
        let text = self.dir.read(name, MANIFEST_FILE).map_err(failed)?;
        Ok(text.and_then(|t| Manifest::parse(&t).ok()))
    }

    /// Complete step checkpoints whose manifest reads, newest first.
    pub fn candidates(&self) -> Result<Vec<Found>, RankError> {
        let mut found = Vec::new();
        for (_, name) in self.steps()?.into_iter().rev() {
            if let Some(manifest) = self.manifest(&name)? {
                found.push(Found {
                    manifest,
                    location: self.dir.location_of(&name),
                    name,
                });
            }
        }
        Ok(found)
    }

    /// The newest complete checkpoint, if any.
    pub fn latest(&self) -> Result<Option<Found>, RankError> {
        Ok(self.candidates()?.into_iter().next())
    }

    /// The best checkpoint's manifest, if there is one.
    pub fn best(&self) -> Result<Option<Manifest>, RankError> {
        self.manifest(BEST_DIR)
    }

    /// Load `found` into `state`, verified against its manifest; a
    /// [`Corrupt`] checkpoint leaves `state` to be loaded from another. A
    /// state file that cannot be fetched is the store's trouble (retried by
    /// a restart), not a corrupt checkpoint.
    pub fn restore(
        &self,
        found: &Found,
        run_dir: &Path,
        state: &mut TrainState,
    ) -> Result<Result<(), Corrupt>, RankError> {
        let fetched = self
            .dir
            .fetch(&found.name, STATE_FILE, run_dir)
            .map_err(failed)?;
        restore_file(fetched.path(), &found.location, &found.manifest, state)
    }
}
