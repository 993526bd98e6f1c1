//! Checkpoints as the popular frameworks write them into
//! `COHORT_CHECKPOINT_DIR` (docs/programs.md), recognised with no change
//! to the program:
//!
//! - PyTorch Lightning's `ModelCheckpoint`: `*.ckpt` files, the step read
//!   from the checkpoint's `global_step` (a file appears whole: Lightning
//!   saves to a temporary name and renames; one that is not a complete
//!   archive yet is looked at again later);
//! - Hugging Face Trainer: `checkpoint-<N>` directories, complete once
//!   `trainer_state.json` (written after the weights and the optimizer's
//!   state) is in them.
//!
//! The agent of rank 0 *adopts* each complete one: it hard-links it (no
//! bytes copied) into a `step-<N>/` directory under its own name
//! (`step-00000100/checkpoint-100/…`, `step-00000100/epoch=0-step=100.ckpt`),
//! published by a rename like a program's own. From there on it is a
//! checkpoint like any other: recorded, uploaded, downloaded, kept to
//! `keep` (the framework's original goes with it) and resumed from. The
//! framework may delete its original (its own rotation): the adopted copy
//! stays until `keep` drops it.
//!
//! Blocking file-system work: callers run it off the async runtime.
#![allow(clippy::disallowed_methods)]

use super::lightning;
use cohort_spec::checkpoint::{step_dir_name, step_of};
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The file that makes a Hugging Face checkpoint complete.
pub const HF_STATE: &str = "trainer_state.json";
/// Lightning's checkpoint files end so.
pub const LIGHTNING_SUFFIX: &str = ".ckpt";
/// The most entries one adopted checkpoint may hold.
const MAX_ENTRIES: usize = 10_000;

/// The step of a Hugging Face `checkpoint-<N>` name.
pub fn hf_step(name: &str) -> Option<i64> {
    let digits = name.strip_prefix("checkpoint-")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn is_lightning_name(name: &str) -> bool {
    name.len() > LIGHTNING_SUFFIX.len()
        && name.ends_with(LIGHTNING_SUFFIX)
        && !name.starts_with('.')
}

/// What a framework wrote: its name in the checkpoint directory and step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Original {
    pub name: String,
    pub step: i64,
}

/// What the last look learned of each `.ckpt` file, so an unchanged file
/// is not read again: (size, mtime) -> its step, or `None` when it was no
/// complete archive. Holds the directory's files only.
#[derive(Debug, Default)]
pub struct Seen {
    ckpt: HashMap<String, (u64, SystemTime, Option<i64>)>,
}

impl Seen {
    fn lightning_step(&mut self, name: &str, path: &Path, meta: &std::fs::Metadata) -> Option<i64> {
        let stamp = (
            meta.len(),
            meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        );
        if let Some((len, at, step)) = self.ckpt.get(name) {
            if (*len, *at) == stamp {
                return *step;
            }
        }
        let step = match lightning::global_step(path) {
            Ok(step) => Some(step),
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "not a complete Lightning checkpoint (yet)");
                None
            }
        };
        self.ckpt.insert(name.to_string(), (stamp.0, stamp.1, step));
        step
    }
}

/// The complete framework checkpoints in `dir`, by name.
pub fn originals(dir: &Path, seen: &mut Seen) -> Vec<Original> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let mut names = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        // symlink_metadata: a link (Lightning's `save_last="link"`) is not a checkpoint.
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        let step = if meta.is_dir() {
            hf_step(&name).filter(|_| entry.path().join(HF_STATE).is_file())
        } else if meta.is_file() && is_lightning_name(&name) {
            names.push(name.clone());
            seen.lightning_step(&name, &entry.path(), &meta)
        } else {
            None
        };
        if let Some(step) = step.filter(|s| *s >= 0) {
            found.push(Original { name, step });
        }
    }
    seen.ckpt.retain(|name, _| names.contains(name));
    found.sort_by(|a, b| (a.step, &a.name).cmp(&(b.step, &b.name)));
    found
}

/// Adopts every complete framework checkpoint in `dir` whose step has no
/// `step-<N>/` yet (the first by name wins a step: `last.ckpt` beside
/// `epoch=0-step=100.ckpt` is the same state). Returns the steps adopted.
pub fn adopt(dir: &Path, seen: &mut Seen) -> Vec<i64> {
    let mut adopted = Vec::new();
    for original in originals(dir, seen) {
        let target = dir.join(step_dir_name(original.step));
        if target.exists() {
            continue;
        }
        match adopt_one(dir, &original, &target) {
            Ok(()) => {
                tracing::info!(step = original.step, name = %original.name, "adopted a framework checkpoint");
                adopted.push(original.step);
            }
            Err(e) => {
                tracing::warn!(step = original.step, name = %original.name, error = %e, "cannot adopt a framework checkpoint");
            }
        }
    }
    adopted
}

fn adopt_one(dir: &Path, original: &Original, target: &Path) -> Result<(), String> {
    let staging = dir.join(format!(".{}.adopting", step_dir_name(original.step)));
    let fail = |e: std::io::Error| format!("{}: {e}", staging.display());
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(fail)?;
    }
    std::fs::create_dir(&staging).map_err(fail)?;
    let mut budget = MAX_ENTRIES;
    let linked = link_tree(
        &dir.join(&original.name),
        &staging.join(&original.name),
        &mut budget,
    )
    .and_then(|()| std::fs::rename(&staging, target).map_err(|e| e.to_string()));
    if linked.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    linked
}

/// Hard-links `from` (a file, or a directory's files and directories; links
/// and the like skipped) to `to`. Never a copy: a copy would follow a link
/// the program swapped in, and read as the agent what the program may not.
/// (`link` itself does not follow one; the tree is in one directory, so on
/// one file system.)
fn link_tree(from: &Path, to: &Path, budget: &mut usize) -> Result<(), String> {
    *budget = budget
        .checked_sub(1)
        .ok_or_else(|| format!("over {MAX_ENTRIES} files"))?;
    let fail = |e: std::io::Error| format!("{}: {e}", from.display());
    let meta = from.symlink_metadata().map_err(fail)?;
    if meta.is_file() {
        return std::fs::hard_link(from, to).map_err(fail);
    }
    if !meta.is_dir() {
        return Ok(());
    }
    std::fs::create_dir(to).map_err(fail)?;
    for entry in std::fs::read_dir(from).map_err(fail)? {
        let entry = entry.map_err(fail)?;
        link_tree(&entry.path(), &to.join(entry.file_name()), budget)?;
    }
    Ok(())
}

/// The framework checkpoint an adopted `step-<N>/` holds: its one entry,
/// a `checkpoint-<N>` directory or a `.ckpt` file.
pub fn adopted_entry(step_dir: &Path) -> Option<PathBuf> {
    let mut entries = std::fs::read_dir(step_dir).ok()?.filter_map(Result::ok);
    let only = entries.next()?;
    if entries.next().is_some() {
        return None;
    }
    let name = only.file_name().to_str()?.to_string();
    let meta = only.path().symlink_metadata().ok()?;
    let framework =
        (meta.is_dir() && hf_step(&name).is_some()) || (meta.is_file() && is_lightning_name(&name));
    framework.then(|| only.path())
}

/// What a restart names in its environment: `COHORT_RESUME_DIR` (a
/// directory) and `COHORT_RESUME_PATH` (the checkpoint itself: the `.ckpt`
/// file of a Lightning checkpoint, the directory otherwise).
pub fn resume_paths(step_dir: &Path) -> (PathBuf, PathBuf) {
    match adopted_entry(step_dir) {
        Some(entry) if entry.is_dir() => (entry.clone(), entry),
        Some(file) => (step_dir.to_path_buf(), file),
        None => (step_dir.to_path_buf(), step_dir.to_path_buf()),
    }
}

/// Removes the framework's original of an adopted `step-<N>/` that `keep`
/// drops, if it is still the same (same inode: the framework may have
/// written a new one under the name since).
pub fn remove_original(dir: &Path, step_dir: &Path) {
    let Some(entry) = adopted_entry(step_dir) else {
        return;
    };
    let Some(name) = entry.file_name() else {
        return;
    };
    let original = dir.join(name);
    let key = |p: &Path| {
        let file = if p.is_dir() {
            p.join(HF_STATE)
        } else {
            p.to_path_buf()
        };
        file.metadata().ok().map(|m| (m.dev(), m.ino()))
    };
    if key(&original).is_none() || key(&original) != key(&entry) {
        return;
    }
    let removed = if original.is_dir() {
        std::fs::remove_dir_all(&original)
    } else {
        std::fs::remove_file(&original)
    };
    if let Err(e) = removed {
        tracing::warn!(path = %original.display(), error = %e, "cannot remove a framework checkpoint beyond keep");
    }
}

/// Before a restarted attempt starts: the framework checkpoints written
/// after `resume` (the step it resumes from; `None`: from scratch) by a
/// superseded attempt, originals and adopted copies alike. The new attempt
/// writes those steps again (a framework may write into the same
/// directory, which must not reach an adopted copy's linked files), and
/// they are its to record.
pub fn discard_after(dir: &Path, resume: Option<i64>) {
    let beyond = |step: i64| resume.is_none_or(|r| step > r);
    let mut seen = Seen::default();
    for original in originals(dir, &mut seen) {
        if beyond(original.step) {
            remove_logged(&dir.join(&original.name));
        }
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let step = entry.file_name().to_str().and_then(step_of);
        if step.is_some_and(beyond) && adopted_entry(&entry.path()).is_some() {
            remove_logged(&entry.path());
        }
    }
}

fn remove_logged(path: &Path) {
    let removed = if path.symlink_metadata().is_ok_and(|m| m.is_dir()) {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
    match removed {
        Ok(()) => {
            tracing::info!(path = %path.display(), "removed a superseded attempt's framework checkpoint")
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove a superseded attempt's checkpoint")
        }
    }
}

#[cfg(test)]
mod tests;
