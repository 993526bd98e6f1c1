//! The log the agent keeps of each rank: its stderr and the stdout lines
//! that are not progress lines, in the order they came, in
//! `<work>/trainings/<training>/attempt-<n>/rank-<r>.log`. A log is capped:
//! past [`GENERATION_BYTES`] it is rotated (`.log` becomes `.log.1`, the
//! older `.log.1` is dropped) and the new file begins with a note saying
//! so. The coordinator reads them through the agent's file server
//! (`connect/files.rs`) for WatchLogs.

use std::path::{Path, PathBuf};
use tokio::io::AsyncWriteExt;

/// Bytes per generation: a rank keeps at most two (16 MiB).
pub const GENERATION_BYTES: u64 = 8 << 20;
/// The first line of a log that replaced a full one.
pub const ROTATED_NOTE: &str = "[cohort] older lines of this rank were dropped: its log keeps the newest two generations of 8 MiB";

/// Where the log of `rank` of `attempt` is kept (the previous generation
/// with `previous`). `None` for a training id that could name another
/// directory.
pub fn log_path(
    work_dir: &Path,
    training_id: &str,
    attempt: u32,
    rank: u32,
    previous: bool,
) -> Option<PathBuf> {
    let plain = !training_id.is_empty()
        && training_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    plain.then(|| {
        let name = format!("rank-{rank}.log{}", if previous { ".1" } else { "" });
        work_dir
            .join("trainings")
            .join(training_id)
            .join(format!("attempt-{attempt}"))
            .join(name)
    })
}

/// An open rank log.
pub struct RankLog {
    path: PathBuf,
    file: Option<tokio::fs::File>,
    written: u64,
}

impl RankLog {
    /// Appends to `path` (created, with its directory, when missing). A log
    /// that cannot be opened is reported once and then written nowhere: the
    /// rank runs on.
    pub async fn open(path: PathBuf) -> RankLog {
        let mut log = RankLog {
            path,
            file: None,
            written: 0,
        };
        log.reopen().await;
        log
    }

    async fn reopen(&mut self) {
        if let Some(dir) = self.path.parent() {
            let _ = tokio::fs::create_dir_all(dir).await;
        }
        let opened = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .await;
        match opened {
            Ok(file) => {
                self.written = file.metadata().await.map(|m| m.len()).unwrap_or(0);
                self.file = Some(file);
            }
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot keep a rank's log");
                self.file = None;
            }
        }
    }

    /// Appends one line (a line ending is added).
    pub async fn line(&mut self, line: &str) {
        if self.written + line.len() as u64 + 1 > GENERATION_BYTES && self.written > 0 {
            self.rotate().await;
        }
        let Some(file) = self.file.as_mut() else {
            return;
        };
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        match file.write_all(&bytes).await {
            Ok(()) => self.written += bytes.len() as u64,
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "a rank's log stopped");
                self.file = None;
            }
        }
    }

    /// The current generation becomes the previous one; the new one starts
    /// with [`ROTATED_NOTE`].
    async fn rotate(&mut self) {
        if let Some(mut file) = self.file.take() {
            let _ = file.flush().await;
        }
        let mut previous = self.path.clone().into_os_string();
        previous.push(".1");
        if let Err(e) = tokio::fs::rename(&self.path, &previous).await {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot rotate a rank's log");
        }
        self.reopen().await;
        self.written = 0;
        if let Some(file) = self.file.as_mut() {
            let note = format!("{ROTATED_NOTE}\n");
            if file.write_all(note.as_bytes()).await.is_ok() {
                self.written = note.len() as u64;
            }
        }
    }

    pub async fn flush(&mut self) {
        if let Some(file) = self.file.as_mut() {
            let _ = file.flush().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_in_the_training_s_attempt() {
        let work = Path::new("/w");
        assert_eq!(
            log_path(work, "trn-1", 2, 0, false).unwrap(),
            Path::new("/w/trainings/trn-1/attempt-2/rank-0.log")
        );
        assert_eq!(
            log_path(work, "trn-1", 2, 3, true).unwrap(),
            Path::new("/w/trainings/trn-1/attempt-2/rank-3.log.1")
        );
        for bad in ["", "..", "a/b", "../x", "a b"] {
            assert!(log_path(work, bad, 1, 0, false).is_none(), "{bad:?}");
        }
    }

    #[tokio::test]
    #[allow(clippy::disallowed_methods)]
    async fn a_full_log_rotates_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("attempt-1/rank-0.log");
        let mut log = RankLog::open(path.clone()).await;
        let line = "x".repeat(1 << 20);
        for _ in 0..9 {
            log.line(&line).await;
        }
        log.flush().await;
        let previous = std::fs::metadata(path.with_extension("log.1"))
            .unwrap()
            .len();
        // 7 lines fit in 8 MiB; the 8th began the new generation.
        assert_eq!(previous, 7 * ((1 << 20) + 1), "the full generation moved");
        let current = std::fs::read_to_string(&path).unwrap();
        let mut lines = current.lines();
        assert_eq!(lines.next(), Some(ROTATED_NOTE));
        assert_eq!(lines.next().map(str::len), Some(1 << 20));
        assert_eq!(lines.next().map(str::len), Some(1 << 20));
        assert_eq!(lines.next(), None);
    }
}
