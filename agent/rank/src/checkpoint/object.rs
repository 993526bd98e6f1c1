//! Checkpoints in S3-compatible object storage: the state file is uploaded
//! first (multipart), the manifest last, so a reader that finds a manifest
//! finds the state beside it; pruning deletes the manifest first. Keys:
//! `<prefix>/step-NNNNNNNN/{state.safetensors,manifest.json}`.

use super::{
    io, parse_manifest, step_dir_name, step_of, write_state, Manifest, MANIFEST_FILE, STATE_FILE,
};
use crate::error::RankError;
use crate::model::{Adam, Sae};
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
    fn step_key(&self, step: i64, file: &str) -> String {
        join_key(&join_key(&self.key, &step_dir_name(step)), file)
    }

    pub fn uri(&self, step: i64) -> String {
        format!(
            "s3://{}/{}",
            self.bucket,
            join_key(&self.key, &step_dir_name(step))
        )
    }

    /// Serialise into `scratch` (a local directory), upload, then remove
    /// the local copy.
    pub fn save(
        &self,
        scratch: &Path,
        sae: &Sae,
        adam: &Adam,
        manifest: &Manifest,
    ) -> Result<String, RankError> {
        std::fs::create_dir_all(scratch).map_err(|e| io("create", scratch, e))?;
        let local = scratch.join(format!(".upload-{}", step_dir_name(manifest.step)));
        write_state(&local, sae, adam)?;
        let file = std::fs::File::open(&local).map_err(|e| io("read", &local, e))?;
        let uploaded = s3::upload(
            &self.bucket,
            &self.step_key(manifest.step, STATE_FILE),
            file,
        );
        let _ = std::fs::remove_file(&local);
        uploaded.map_err(err)?;
        let text = serde_json::to_vec_pretty(manifest).expect("manifest serialises");
        s3::put(
            &self.bucket,
            &self.step_key(manifest.step, MANIFEST_FILE),
            text,
        )
        .map_err(err)?;
        Ok(self.uri(manifest.step))
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

    pub fn manifest(&self, step: i64) -> Result<Option<Manifest>, RankError> {
        let bytes = s3::get(&self.bucket, &self.step_key(step, MANIFEST_FILE)).map_err(err)?;
        Ok(parse_manifest(&bytes))
    }

    /// Download the state of `step` into `path`.
    pub fn download_state(&self, step: i64, path: &Path) -> Result<(), RankError> {
        let mut file = std::fs::File::create(path).map_err(|e| io("create", path, e))?;
        s3::download(&self.bucket, &self.step_key(step, STATE_FILE), &mut file).map_err(err)
    }

    pub fn delete(&self, step: i64) -> Result<(), RankError> {
        s3::delete(&self.bucket, &self.step_key(step, MANIFEST_FILE)).map_err(err)?;
        s3::delete(&self.bucket, &self.step_key(step, STATE_FILE)).map_err(err)
    }
}
