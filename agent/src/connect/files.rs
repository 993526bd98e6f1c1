//! ReadFile: the coordinator reads a checkpoint kept on this host (for
//! DownloadCheckpoint) or a rank's log (for WatchLogs). Only files in a
//! `step-*` (or the `best`) directory under a `checkpoints` directory below
//! this agent's `<work-dir>/trainings` (a program's may be nested), and the
//! logs of the ranks it ran, are served, at most 1 MiB per request; such a
//! directory can also be listed; everything else is refused.

use crate::supervisor::log::log_path;
use cohort_proto::v1;
use cohort_spec::checkpoint::{is_checkpoint_dir, CHECKPOINTS_DIR};
use cohort_storage::local::open_resolved;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Bytes served per request at most.
pub const MAX_READ: u64 = 1 << 20;

/// Opens `requested` if it is a file we serve. The checks run on what was
/// opened — the real path of the open descriptor, read back from
/// `/proc/self/fd` — not on the name before opening it, so a link swapped
/// in between (a rank racing the agent) cannot lead the read out of the
/// checkpoint directories. Opened non-blocking, so a FIFO planted under a
/// checkpoint name cannot hang the reader; it is then refused as not a file.
fn open_allowed(work_dir: &Path, requested: &str) -> Result<std::fs::File, String> {
    let path = Path::new(requested);
    if !path.is_absolute() {
        return Err("the path is not absolute".into());
    }
    let root = work_dir
        .join("trainings")
        .canonicalize()
        .map_err(|e| format!("no trainings directory: {e}"))?;
    let (file, real) = open_resolved(path).map_err(|e| format!("{requested}: {e}"))?;
    let is_file = file.metadata().is_ok_and(|m| m.is_file());
    let in_checkpoint = real.ancestors().skip(1).any(is_served_checkpoint);
    if !real.starts_with(&root) || !in_checkpoint || !is_file {
        return Err(format!(
            "{requested} is not a checkpoint file of this agent"
        ));
    }
    Ok(file)
}

/// Whether `dir` is a checkpoint directory (`step-*` or `best`) directly
/// under a `checkpoints` directory.
fn is_served_checkpoint(dir: &Path) -> bool {
    let named = dir
        .file_name()
        .is_some_and(|n| is_checkpoint_dir(&n.to_string_lossy()));
    let under = dir
        .parent()
        .and_then(Path::file_name)
        .is_some_and(|n| n == CHECKPOINTS_DIR);
    named && under
}

/// The most files a listing names (it must fit one answer).
const MAX_LISTED: usize = 10_000;

/// The files of a checkpoint directory of this agent, one per line.
fn list_allowed(work_dir: &Path, requested: &str) -> Result<Vec<u8>, String> {
    let root = work_dir
        .join("trainings")
        .canonicalize()
        .map_err(|e| format!("no trainings directory: {e}"))?;
    let real = Path::new(requested)
        .canonicalize()
        .map_err(|e| format!("{requested}: {e}"))?;
    if !real.starts_with(&root) || !is_served_checkpoint(&real) {
        return Err(format!("{requested} is not a checkpoint of this agent"));
    }
    let files = cohort_storage::tree::list_files(&real, MAX_LISTED)
        .map_err(|e| format!("{requested}: {e}"))?;
    let listing = files.join("\n").into_bytes();
    if listing.len() as u64 > MAX_READ {
        return Err(format!("{requested}: its listing is over {MAX_READ} bytes"));
    }
    Ok(listing)
}

/// Opens the log of a rank this agent ran (see `supervisor::log`), if there
/// is one: checked, like a checkpoint file, on what was opened.
fn open_log(work_dir: &Path, log: &v1::RankLog) -> Result<std::fs::File, String> {
    let what = format!(
        "the log of rank {} of {} attempt {}",
        log.rank, log.training_id, log.attempt
    );
    let (Ok(attempt), Ok(rank)) = (u32::try_from(log.attempt), u32::try_from(log.rank)) else {
        return Err(format!("{what}: no such rank"));
    };
    let path = log_path(work_dir, &log.training_id, attempt, rank, log.previous)
        .ok_or_else(|| format!("{what}: not a training id"))?;
    let root = work_dir
        .join("trainings")
        .canonicalize()
        .map_err(|e| format!("no trainings directory: {e}"))?;
    let (file, real) = open_resolved(&path).map_err(|e| format!("{what}: {e}"))?;
    let is_file = file.metadata().is_ok_and(|m| m.is_file());
    if !real.starts_with(&root) || !is_file {
        return Err(format!("{what} is not a file this agent serves"));
    }
    Ok(file)
}

/// Answer one ReadFile (blocking file I/O: run it off the session's loop).
#[allow(clippy::disallowed_methods)]
pub fn read(work_dir: &Path, req: &v1::ReadFile) -> v1::FileChunk {
    let answer = |data: Vec<u8>, file_size: u64, error: String| v1::FileChunk {
        request_id: req.request_id,
        data,
        file_size,
        error,
    };
    if req.list && req.log.is_none() {
        return match list_allowed(work_dir, &req.path) {
            Ok(listing) => {
                let size = listing.len() as u64;
                answer(listing, size, String::new())
            }
            Err(e) => {
                tracing::warn!(path = %req.path, error = %e, "refusing a listing");
                answer(Vec::new(), 0, e)
            }
        };
    }
    let opened = match &req.log {
        Some(log) => open_log(work_dir, log),
        None => open_allowed(work_dir, &req.path),
    };
    let result = opened.and_then(|mut file| {
        let size = file
            .metadata()
            .map_err(|e| format!("{}: {e}", req.path))?
            .len();
        let want = (req.length as u64)
            .min(MAX_READ)
            .min(size.saturating_sub(req.offset));
        let mut data = vec![0u8; want as usize];
        file.seek(SeekFrom::Start(req.offset))
            .and_then(|_| file.read_exact(&mut data))
            .map_err(|e| format!("{}: {e}", req.path))?;
        Ok((data, size))
    });
    match result {
        Ok((data, size)) => answer(data, size, String::new()),
        // A log not written yet is no attack: not worth a warning.
        Err(e) if req.log.is_some() => {
            tracing::debug!(error = %e, "refusing a log read");
            answer(Vec::new(), 0, e)
        }
        Err(e) => {
            tracing::warn!(path = %req.path, error = %e, "refusing a ReadFile");
            answer(Vec::new(), 0, e)
        }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use cohort_spec::checkpoint::MANIFEST_FILE;
    use std::path::PathBuf;

    #[test]
    fn serves_checkpoint_files_only() {
        let work = tempfile::tempdir().unwrap();
        let step = work
            .path()
            .join("trainings/t1/run/checkpoints/step-00000020");
        std::fs::create_dir_all(&step).unwrap();
        std::fs::write(step.join("state.safetensors"), b"0123456789").unwrap();
        std::fs::write(work.path().join("trainings/t1/secret"), b"no").unwrap();
        let req = |path: PathBuf, offset, length| v1::ReadFile {
            request_id: 7,
            path: path.display().to_string(),
            offset,
            length,
            log: None,
            list: false,
        };
        let best = step.with_file_name("best");
        std::fs::create_dir_all(&best).unwrap();
        std::fs::write(best.join(MANIFEST_FILE), b"{}").unwrap();
        assert!(read(work.path(), &req(best.join(MANIFEST_FILE), 0, 10))
            .error
            .is_empty());
        let got = read(work.path(), &req(step.join("state.safetensors"), 3, 4));
        assert_eq!(
            (got.data, got.file_size, got.request_id),
            (b"3456".to_vec(), 10, 7)
        );
        assert!(got.error.is_empty());
        let size_only = read(work.path(), &req(step.join("state.safetensors"), 0, 0));
        assert_eq!((size_only.data.len(), size_only.file_size), (0, 10));
        // A link under a checkpoint name that leads out, and a FIFO there
        // (which would block an open that waits for a writer).
        let out = step.join("link.safetensors");
        std::os::unix::fs::symlink(work.path().join("trainings/t1/secret"), &out).unwrap();
        let fifo = step.join("fifo.safetensors");
        let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        for bad in [
            out,
            fifo,
            work.path().join("trainings/t1/secret"),
            step.join("../../../secret"),
            PathBuf::from("/etc/passwd"),
            step.join("missing"),
        ] {
            let got = read(work.path(), &req(bad.clone(), 0, 10));
            assert!(
                !got.error.is_empty() && got.data.is_empty(),
                "{}",
                bad.display()
            );
        }
    }

    #[test]
    fn serves_the_logs_of_its_ranks_only() {
        let work = tempfile::tempdir().unwrap();
        let attempt = work.path().join("trainings/t1/attempt-1");
        std::fs::create_dir_all(&attempt).unwrap();
        std::fs::write(attempt.join("rank-0.log"), b"hello\nworld\n").unwrap();
        std::fs::write(work.path().join("secret"), b"no").unwrap();
        std::os::unix::fs::symlink(work.path().join("secret"), attempt.join("rank-1.log")).unwrap();
        let req = |training: &str, rank, offset, length| v1::ReadFile {
            request_id: 9,
            path: "/etc/passwd".into(),
            offset,
            length,
            log: Some(v1::RankLog {
                training_id: training.into(),
                attempt: 1,
                rank,
                previous: false,
            }),
            list: false,
        };
        let got = read(work.path(), &req("t1", 0, 6, 100));
        assert!(got.error.is_empty(), "{}", got.error);
        assert_eq!((got.data, got.file_size), (b"world\n".to_vec(), 12));
        for (training, rank) in [("t1", 1), ("t1", 2), ("..", 0), ("t1/../t1", 0), ("t1", -1)] {
            let got = read(work.path(), &req(training, rank, 0, 100));
            assert!(
                !got.error.is_empty() && got.data.is_empty(),
                "{training} rank {rank}"
            );
        }
    }

    #[test]
    fn lists_and_serves_a_program_checkpoint_as_written() {
        let work = tempfile::tempdir().unwrap();
        let step = work.path().join("trainings/p1/run/checkpoints/step-7");
        std::fs::create_dir_all(step.join("opt")).unwrap();
        std::fs::write(step.join("model.pt"), b"weights").unwrap();
        std::fs::write(step.join("opt/adam.pt"), b"moments").unwrap();
        std::fs::write(work.path().join("trainings/p1/run/secret"), b"no").unwrap();
        std::os::unix::fs::symlink(
            work.path().join("trainings/p1/run/secret"),
            step.join("leak"),
        )
        .unwrap();
        let req = |path: &Path, list| v1::ReadFile {
            request_id: 3,
            path: path.display().to_string(),
            offset: 0,
            length: 100,
            log: None,
            list,
        };
        let listing = read(work.path(), &req(&step, true));
        assert!(listing.error.is_empty(), "{}", listing.error);
        assert_eq!(
            String::from_utf8(listing.data).unwrap(),
            "model.pt\nopt/adam.pt"
        );
        let nested = read(work.path(), &req(&step.join("opt/adam.pt"), false));
        assert_eq!(nested.data, b"moments");
        for bad in [
            work.path().join("trainings/p1/run"),
            work.path().join("trainings/p1/run/checkpoints"),
            PathBuf::from("/etc"),
        ] {
            assert!(
                !read(work.path(), &req(&bad, true)).error.is_empty(),
                "{}",
                bad.display()
            );
        }
        assert!(!read(work.path(), &req(&step.join("leak"), false))
            .error
            .is_empty());
    }
}
