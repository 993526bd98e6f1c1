//! Checkpoints on a file system (rank 0's work dir, or a shared path):
//! written into a hidden temporary directory, fsynced, then renamed into
//! place, so a crash mid-write leaves only a temporary that is ignored.

use super::{io, parse_manifest, step_dir_name, write_state, Manifest, MANIFEST_FILE, STATE_FILE};
use crate::error::RankError;
use crate::model::{Adam, Sae};
use std::fs;
use std::path::{Path, PathBuf};

pub struct Loaded {
    pub manifest: Manifest,
    pub dir: PathBuf,
}

/// The default root: `<run-dir>/checkpoints`.
pub fn checkpoints_dir(run_dir: &Path) -> PathBuf {
    run_dir.join("checkpoints")
}

/// Write a checkpoint of `sae` and `adam` at `manifest.step` under `root`;
/// returns its directory.
pub fn save(
    root: &Path,
    sae: &Sae,
    adam: &Adam,
    manifest: &Manifest,
) -> Result<PathBuf, RankError> {
    fs::create_dir_all(root).map_err(|e| io("create", root, e))?;
    let final_dir = root.join(step_dir_name(manifest.step));
    let tmp = root.join(format!(
        ".{}.tmp-{}",
        step_dir_name(manifest.step),
        std::process::id()
    ));
    if tmp.exists() {
        fs::remove_dir_all(&tmp).map_err(|e| io("remove", &tmp, e))?;
    }
    fs::create_dir_all(&tmp).map_err(|e| io("create", &tmp, e))?;
    let state = tmp.join(STATE_FILE);
    write_state(&state, sae, adam)?;
    sync_file(&state)?;

    let manifest_path = tmp.join(MANIFEST_FILE);
    let text = serde_json::to_string_pretty(manifest).expect("manifest serialises");
    fs::write(&manifest_path, text).map_err(|e| io("write", &manifest_path, e))?;
    sync_file(&manifest_path)?;

    if final_dir.exists() {
        fs::remove_dir_all(&final_dir).map_err(|e| io("replace", &final_dir, e))?;
    }
    fs::rename(&tmp, &final_dir).map_err(|e| io("rename", &final_dir, e))?;
    sync_file(root)?;
    Ok(final_dir)
}

fn sync_file(path: &Path) -> Result<(), RankError> {
    fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| io("sync", path, e))
}

/// Complete checkpoints under `root`, oldest first.
pub fn list_root(root: &Path) -> Vec<Loaded> {
    let Ok(entries) = fs::read_dir(root) else {
        return Vec::new();
    };
    let mut found: Vec<Loaded> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("step-"))
        .filter_map(|e| {
            let dir = e.path();
            let manifest = parse_manifest(&fs::read(dir.join(MANIFEST_FILE)).ok()?)?;
            dir.join(STATE_FILE)
                .is_file()
                .then_some(Loaded { manifest, dir })
        })
        .collect();
    found.sort_by_key(|l| l.manifest.step);
    found
}

/// Complete checkpoints in a run dir's default root, oldest first.
pub fn list(run_dir: &Path) -> Vec<Loaded> {
    list_root(&checkpoints_dir(run_dir))
}

/// The newest complete checkpoint in a run dir's default root, if any.
pub fn latest(run_dir: &Path) -> Option<Loaded> {
    list(run_dir).pop()
}

/// Remove all but the newest `keep` complete checkpoints under `root`.
pub fn prune(root: &Path, keep: usize) -> Result<(), RankError> {
    let all = list_root(root);
    let excess = all.len().saturating_sub(keep);
    for old in all.into_iter().take(excess) {
        fs::remove_dir_all(&old.dir).map_err(|e| io("prune", &old.dir, e))?;
    }
    Ok(())
}
