//! Checkpoints on a file system (rank 0's work dir, or a shared path):
//! written into a hidden temporary directory, fsynced, then renamed into
//! place, so a crash mid-write leaves only a temporary that is ignored.

use super::{io, parse_manifest, step_dir_name, write_state, Manifest, MANIFEST_FILE, STATE_FILE};
use crate::error::RankError;
use crate::state::TrainState;
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

/// Write a checkpoint of `state` at `manifest.step` under `root`; returns
/// its directory.
pub fn save(root: &Path, state: &TrainState, manifest: &Manifest) -> Result<PathBuf, RankError> {
    save_as(root, &step_dir_name(manifest.step), state, manifest)
}

/// Write a checkpoint of `state` as `root/<name>` (a step, or `best`),
/// replacing what was there; the manifest gets the state file's digest.
pub fn save_as(
    root: &Path,
    name: &str,
    state: &TrainState,
    manifest: &Manifest,
) -> Result<PathBuf, RankError> {
    fs::create_dir_all(root).map_err(|e| io("create", root, e))?;
    let final_dir = root.join(name);
    let tmp = root.join(format!(".{name}.tmp-{}", std::process::id()));
    if tmp.exists() {
        fs::remove_dir_all(&tmp).map_err(|e| io("remove", &tmp, e))?;
    }
    fs::create_dir_all(&tmp).map_err(|e| io("create", &tmp, e))?;
    let state_path = tmp.join(STATE_FILE);
    let digest = write_state(&state_path, state)?;
    sync_file(&state_path)?;

    let manifest_path = tmp.join(MANIFEST_FILE);
    let manifest = Manifest {
        state_sha256: Some(digest),
        ..manifest.clone()
    };
    let text = serde_json::to_string_pretty(&manifest).expect("manifest serialises");
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

/// The complete checkpoint in `dir`, if it is one.
pub fn load(dir: PathBuf) -> Option<Loaded> {
    let manifest = parse_manifest(&fs::read(dir.join(MANIFEST_FILE)).ok()?)?;
    dir.join(STATE_FILE)
        .is_file()
        .then_some(Loaded { manifest, dir })
}

/// Complete checkpoints under `root`, oldest first.
pub fn list_root(root: &Path) -> Vec<Loaded> {
    let Ok(entries) = fs::read_dir(root) else {
        return Vec::new();
    };
    let mut found: Vec<Loaded> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("step-"))
        .filter_map(|e| load(e.path()))
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
