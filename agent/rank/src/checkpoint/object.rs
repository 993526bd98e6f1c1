//! Checkpoints in S3-compatible object storage: the state file is uploaded
//! first (multipart), the manifest last, so a reader that finds a manifest
//! finds the state beside it; pruning deletes the manifest first. Keys:
//! `<prefix>/step-NNNNNNNN/{state.safetensors,manifest.json}`.

use super::{
    io, parse_manifest, step_dir_name, step_of, write_state, Manifest, MANIFEST_FILE, STATE_FILE,
};
use crate::error::RankError;
use crate::state::TrainState;
use crate::storage::{join_key, s3};
use std::collections::BTreeMap;
use std::path::Path;

pub struct Prefix {
    pub bucket: String,
    pub key: String,
}

fn err(e: String) -> RankError {
    RankError::Checkpoint(e)
}

impl Prefix {
    fn key_of(&self, dir: &str, file: &str) -> String {
        join_key(&join_key(&self.key, dir), file)
    }

    fn step_key(&self, step: i64, file: &str) -> String {
        self.key_of(&step_dir_name(step), file)
    }

    pub fn uri_of(&self, dir: &str) -> String {
        format!("s3://{}/{}", self.bucket, join_key(&self.key, dir))
    }

    pub fn uri(&self, step: i64) -> String {
        self.uri_of(&step_dir_name(step))
    }

    /// Serialise into `scratch` (a local directory), upload as `dir` (a
    /// step's, or `best`), then remove the local copy. The manifest goes
    /// last, with the state file's digest.
    pub fn save_as(
        &self,
        scratch: &Path,
        dir: &str,
        state: &TrainState,
        manifest: &Manifest,
    ) -> Result<String, RankError> {
        std::fs::create_dir_all(scratch).map_err(|e| io("create", scratch, e))?;
        let local = scratch.join(format!(".upload-{dir}"));
        let digest = write_state(&local, state)?;
        let file = std::fs::File::open(&local).map_err(|e| io("read", &local, e))?;
        let uploaded = s3::upload(&self.bucket, &self.key_of(dir, STATE_FILE), file);
        let _ = std::fs::remove_file(&local);
        uploaded.map_err(err)?;
        let manifest = Manifest {
            state_sha256: Some(digest),
            ..manifest.clone()
        };
        let text = serde_json::to_vec_pretty(&manifest).expect("manifest serialises");
        s3::put(&self.bucket, &self.key_of(dir, MANIFEST_FILE), text).map_err(err)?;
        Ok(self.uri_of(dir))
    }

    /// Steps that have both files, oldest first.
    pub fn complete_steps(&self) -> Result<Vec<i64>, RankError> {
        let prefix = join_key(&self.key, "");
        let mut files: BTreeMap<i64, (bool, bool)> = BTreeMap::new();
        for (key, _) in s3::list(&self.bucket, &prefix, true).map_err(err)? {
            let rest = key
                .strip_prefix(prefix.as_str())
                .unwrap_or(&key)
                .trim_start_matches('/');
            let Some((dir, file)) = rest.split_once('/') else {
                continue;
            };
            let Some(step) = step_of(dir) else { continue };
            let entry = files.entry(step).or_default();
            match file {
                STATE_FILE => entry.0 = true,
                MANIFEST_FILE => entry.1 = true,
                _ => {}
            }
        }
        Ok(files
            .into_iter()
            .filter(|(_, (state, manifest))| *state && *manifest)
            .map(|(step, _)| step)
            .collect())
    }

    /// The manifest of `dir` (a step's or `best`), if it is there and parses.
    pub fn manifest(&self, dir: &str) -> Result<Option<Manifest>, RankError> {
        let bytes =
            s3::get_if_present(&self.bucket, &self.key_of(dir, MANIFEST_FILE)).map_err(err)?;
        Ok(bytes.and_then(|b| parse_manifest(&b)))
    }

    /// Download the state of `dir` into `path`.
    pub fn download_state(&self, dir: &str, path: &Path) -> Result<(), RankError> {
        let mut file = std::fs::File::create(path).map_err(|e| io("create", path, e))?;
        s3::download(&self.bucket, &self.key_of(dir, STATE_FILE), &mut file).map_err(err)
    }

    pub fn delete(&self, step: i64) -> Result<(), RankError> {
        s3::delete(&self.bucket, &self.step_key(step, MANIFEST_FILE)).map_err(err)?;
        s3::delete(&self.bucket, &self.step_key(step, STATE_FILE)).map_err(err)
    }
}
