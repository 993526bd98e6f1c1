//! Files on a local or shared file system, opened so that what is read is
//! what was checked: the real path of the open descriptor is read back from
//! `/proc/self/fd`, so a link swapped in between a check and a read (a rank
//! racing its agent, a shard replaced under a rank) cannot lead the read
//! elsewhere; opened non-blocking, so a FIFO planted under a file's name
//! cannot hang the reader.

use super::Blob;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Opens `path` for reading; returns the file and its real path (links
/// resolved, as the kernel opened it). The caller checks the real path and
/// that the file is a regular one.
pub fn open_resolved(path: &Path) -> io::Result<(File, PathBuf)> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let real = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
    Ok((file, real))
}

/// A file on a local or shared file system. It is opened for each call, so
/// thousands of shards hold no file descriptors between reads; each open is
/// checked to be the file first resolved (the one the data roots were
/// checked against), so a link swapped in later cannot lead a read out.
pub struct LocalBlob {
    /// The file's real path, links resolved, when it was first opened.
    real: PathBuf,
    name: String,
    len: u64,
}

impl LocalBlob {
    pub fn open(path: PathBuf) -> io::Result<Self> {
        let meta = std::fs::metadata(&path)?;
        if !meta.is_file() {
            return Err(io::Error::other("not a regular file"));
        }
        Ok(Self {
            name: path.display().to_string(),
            real: path.canonicalize()?,
            len: meta.len(),
        })
    }

    /// Opens the file again and checks, on the descriptor, that it is still
    /// the file first resolved and a regular one.
    fn reopen(&self) -> io::Result<File> {
        let (file, opened) = open_resolved(&self.real)?;
        if opened != self.real || !file.metadata()?.is_file() {
            return Err(io::Error::other(format!(
                "{}: the file changed under the rank (now {}): refusing to read it",
                self.name,
                opened.display()
            )));
        }
        Ok(file)
    }
}

impl Blob for LocalBlob {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn read_ranges(&self, ranges: &[(u64, usize)], out: &mut [u8]) -> io::Result<()> {
        let file = self.reopen()?;
        let mut at = 0;
        for &(offset, len) in ranges {
            file.read_exact_at(&mut out[at..at + len], offset)?;
            at += len;
        }
        Ok(())
    }
}

/// `context path: e`, the form local storage errors take.
pub(crate) fn failed(context: &str, path: &Path, e: impl std::fmt::Display) -> String {
    format!("{context} {}: {e}", path.display())
}

/// fsync a file or a directory.
pub(crate) fn sync(path: &Path) -> Result<(), String> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| failed("sync", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_read_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b");
        std::fs::write(&path, (0u8..100).collect::<Vec<_>>()).unwrap();
        let blob = LocalBlob::open(path).unwrap();
        assert_eq!(blob.len(), 100);
        assert!(!blob.remote());
        let mut out = vec![0u8; 5];
        blob.read_ranges(&[(10, 2), (50, 3)], &mut out).unwrap();
        assert_eq!(out, [10, 11, 50, 51, 52]);
        assert!(blob.read_at(99, 2).is_err(), "a read past the end fails");
    }

    #[test]
    fn a_link_swapped_after_the_check_leads_nowhere() {
        let dir = tempfile::tempdir().unwrap();
        let (root, elsewhere) = (dir.path().join("root"), dir.path().join("elsewhere"));
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::write(root.join("real.npy"), [1u8; 8]).unwrap();
        std::fs::write(elsewhere.join("secret"), [7u8; 8]).unwrap();
        let link = root.join("shard.npy");
        std::os::unix::fs::symlink(root.join("real.npy"), &link).unwrap();
        // Checked and opened while the link leads to a file in the root...
        let blob = LocalBlob::open(link.clone()).unwrap();
        let mut out = [0u8; 4];
        blob.read_ranges(&[(0, 4)], &mut out).unwrap();
        assert_eq!(out, [1; 4]);
        // ... then the file itself becomes a link leading out.
        std::fs::remove_file(root.join("real.npy")).unwrap();
        std::os::unix::fs::symlink(elsewhere.join("secret"), root.join("real.npy")).unwrap();
        let e = blob.read_ranges(&[(0, 4)], &mut out).unwrap_err();
        assert!(e.to_string().contains("changed under the rank"), "{e}");
        assert_eq!(out, [1; 4], "nothing of the other file was read");
    }
}
