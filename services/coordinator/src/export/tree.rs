//! A program's checkpoint as written, on a file system the coordinator
//! reads (shared storage, or a single host): listed and read through
//! [`cohort_storage::tree`], never through a link out of the directory.

use super::ExportError;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// The most files a program's checkpoint may hold to be downloaded.
pub const MAX_FILES: usize = 10_000;

fn failed(dir: &Path, e: impl std::fmt::Display) -> ExportError {
    ExportError::Storage(format!("{}: {e}", dir.display()))
}

async fn blocking<T: Send + 'static>(
    dir: &Path,
    work: impl FnOnce() -> Result<T, ExportError> + Send + 'static,
) -> Result<T, ExportError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| failed(dir, e))?
}

/// The files below `dir`, relative to it.
pub async fn list(dir: &Path) -> Result<Vec<String>, ExportError> {
    let owned = dir.to_path_buf();
    blocking(dir, move || {
        cohort_storage::tree::list_files(&owned, MAX_FILES).map_err(|e| failed(&owned, e))
    })
    .await
}

fn open(dir: &Path, file: &str) -> Result<std::fs::File, ExportError> {
    cohort_storage::tree::open_within(dir, file).map_err(|e| failed(dir, e))
}

/// The size of `file` below `dir`.
pub async fn size(dir: &Path, file: &str) -> Result<u64, ExportError> {
    let (owned, file) = (dir.to_path_buf(), file.to_string());
    blocking(dir, move || {
        let f = open(&owned, &file)?;
        f.metadata().map(|m| m.len()).map_err(|e| failed(&owned, e))
    })
    .await
}

/// `len` bytes of `file` below `dir` from `offset`.
pub async fn read(dir: &Path, file: &str, offset: u64, len: usize) -> Result<Vec<u8>, ExportError> {
    let (owned, file) = (dir.to_path_buf(), file.to_string());
    blocking(dir, move || {
        let mut f = open(&owned, &file)?;
        let mut data = vec![0u8; len];
        f.seek(SeekFrom::Start(offset))
            .and_then(|_| f.read_exact(&mut data))
            .map_err(|e| failed(&owned, format!("{file}: {e}")))?;
        Ok(data)
    })
    .await
}
