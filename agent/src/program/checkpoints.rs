//! A program's checkpoints (docs/programs.md): rank 0 writes `step-<N>/`
//! directories into `COHORT_CHECKPOINT_DIR`, each published by a rename, so
//! a directory named `step-<N>` is complete and any other name (hidden,
//! `.tmp`) is not. The agent running rank 0 watches the directory: each new
//! complete checkpoint is reported (a `checkpoint` line for the
//! coordinator, which records training, attempt, step and time) and the
//! oldest beyond `keep` are removed. On a restart the newest one the
//! coordinator published becomes `COHORT_RESUME_DIR`. Checkpoints as
//! Lightning and Hugging Face write them are adopted into `step-<N>/`
//! directories first ([`super::frameworks`]).
//!
//! Everything here touches the file system synchronously: callers run it
//! off the async runtime (`spawn_blocking`).
#![allow(clippy::disallowed_methods)]

use super::frameworks;
use cohort_spec::checkpoint::step_of;
use cohort_spec::progress::ProgressLine;
use cohort_spec::resume::Published;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// What rank 0's agent watches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointWatch {
    pub dir: PathBuf,
    /// Complete checkpoints kept (the newest); at least 1.
    pub keep: usize,
    /// Object storage each checkpoint is uploaded to before it is reported.
    pub remote: Option<super::remote::RemoteSpec>,
}

/// The complete checkpoints in `dir`, oldest first: directories (not
/// links) named `step-<N>`.
pub fn complete(dir: &Path) -> Vec<(i64, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(i64, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| {
            let step = step_of(e.file_name().to_str()?)?;
            Some((step, e.path()))
        })
        .collect();
    found.sort();
    found
}

/// The newest complete checkpoint whose step the coordinator published (a
/// later attempt resumes from nothing else); `None` on a fresh start.
pub fn resume_dir(dir: &Path, published: &Published, attempt: u32) -> Option<PathBuf> {
    if attempt <= 1 {
        return None;
    }
    let steps: BTreeSet<i64> = published.pairs().iter().map(|(_, s)| *s).collect();
    complete(dir)
        .into_iter()
        .rev()
        .find(|(step, _)| steps.contains(step))
        .map(|(_, path)| path)
}

/// The checkpoints seen so far in one attempt's directory.
pub struct Watcher {
    watch: CheckpointWatch,
    seen: BTreeSet<i64>,
    /// What the frameworks' `.ckpt` files were found to hold.
    frameworks: frameworks::Seen,
    /// The bucket, once its client could be built.
    remote: Option<Result<super::remote::Remote, String>>,
}

impl Watcher {
    /// Starts from what is there (earlier attempts' checkpoints, already
    /// recorded): only what appears later is reported.
    pub fn new(watch: CheckpointWatch) -> Self {
        let seen = complete(&watch.dir).into_iter().map(|(s, _)| s).collect();
        let remote = watch.remote.as_ref().map(super::remote::Remote::open);
        Self {
            watch,
            seen,
            frameworks: frameworks::Seen::default(),
            remote,
        }
    }

    /// Where a new checkpoint is reported to be: uploaded first when the
    /// storage is a bucket (`None` when that failed: it is tried again at
    /// the next look).
    fn publish(&self, step: i64, path: &Path) -> Option<String> {
        match &self.remote {
            None => Some(path.display().to_string()),
            Some(Ok(remote)) => match remote.upload(step, path) {
                Ok(uri) => Some(uri),
                Err(e) => {
                    tracing::warn!(step, error = %e, "cannot upload a checkpoint; trying again");
                    None
                }
            },
            Some(Err(e)) => {
                tracing::warn!(step, error = %e, "no bucket to upload checkpoints to");
                None
            }
        }
    }

    /// The `checkpoint` lines of the checkpoints that appeared since the
    /// last look, oldest first; then removes all but the newest `keep`.
    pub fn poll(&mut self) -> Vec<ProgressLine> {
        frameworks::adopt(&self.watch.dir, &mut self.frameworks);
        let found = complete(&self.watch.dir);
        let mut lines = Vec::new();
        let mut failed = BTreeSet::new();
        for (step, path) in found.iter().filter(|(step, _)| !self.seen.contains(step)) {
            match self.publish(*step, path) {
                Some(at) => lines.push(ProgressLine::Checkpoint {
                    step: *step,
                    path: at,
                    best: false,
                }),
                None => {
                    failed.insert(*step);
                }
            }
        }
        // What is on disk now is what is seen (bounded by the directory),
        // but for what could not be uploaded yet.
        self.seen = found
            .iter()
            .map(|(s, _)| *s)
            .filter(|s| !failed.contains(s))
            .collect();
        if let (Some(Ok(remote)), false) = (&self.remote, lines.is_empty()) {
            if let Err(e) = remote.prune(self.watch.keep) {
                tracing::warn!(error = %e, "cannot prune the bucket's checkpoints");
            }
        }
        let excess = found.len().saturating_sub(self.watch.keep.max(1));
        for (step, path) in found
            .iter()
            .take(excess)
            .filter(|(s, _)| !failed.contains(s))
        {
            frameworks::remove_original(&self.watch.dir, path);
            match std::fs::remove_dir_all(path) {
                Ok(()) => {
                    self.seen.remove(step);
                    tracing::info!(step, path = %path.display(), "removed a checkpoint beyond keep");
                }
                Err(e) => {
                    tracing::warn!(step, path = %path.display(), error = %e, "cannot remove an old checkpoint")
                }
            }
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(dir: &Path, name: &str) {
        std::fs::create_dir_all(dir.join(name)).unwrap();
        std::fs::write(dir.join(name).join("model.pt"), b"x").unwrap();
    }

    #[test]
    fn only_complete_step_directories_count() {
        let dir = tempfile::tempdir().unwrap();
        step(dir.path(), "step-0010");
        step(dir.path(), "step-2");
        step(dir.path(), ".step-30.tmp");
        step(dir.path(), "step-40.tmp");
        std::fs::write(dir.path().join("step-50"), b"a file").unwrap();
        let steps: Vec<i64> = complete(dir.path()).into_iter().map(|(s, _)| s).collect();
        assert_eq!(steps, vec![2, 10]);
    }

    #[test]
    fn new_checkpoints_are_reported_once_and_old_ones_pruned() {
        let dir = tempfile::tempdir().unwrap();
        step(dir.path(), "step-1");
        let mut w = Watcher::new(CheckpointWatch {
            dir: dir.path().into(),
            keep: 2,
            remote: None,
        });
        assert!(w.poll().is_empty(), "an earlier attempt's is not new");
        step(dir.path(), "step-2");
        step(dir.path(), "step-3");
        let lines = w.poll();
        let steps: Vec<i64> = lines
            .iter()
            .map(|l| match l {
                ProgressLine::Checkpoint { step, .. } => *step,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(steps, vec![2, 3]);
        assert!(w.poll().is_empty());
        assert!(!dir.path().join("step-1").exists(), "beyond keep");
        assert!(dir.path().join("step-2").exists() && dir.path().join("step-3").exists());
    }

    #[test]
    fn a_restart_resumes_from_the_newest_published() {
        let dir = tempfile::tempdir().unwrap();
        for s in ["step-100", "step-200", "step-300"] {
            step(dir.path(), s);
        }
        let published = Published::new([(1, 100), (1, 200)]);
        assert_eq!(
            resume_dir(dir.path(), &published, 2),
            Some(dir.path().join("step-200")),
            "step-300 was never published (a superseded attempt's)"
        );
        assert_eq!(resume_dir(dir.path(), &published, 1), None);
        assert_eq!(resume_dir(dir.path(), &Published::new([]), 2), None);
    }
}
