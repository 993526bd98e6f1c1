//! Byte access to shards, wherever they live: a [`Blob`] is one file or
//! object, read by ranges and never whole.

use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// Why rows could not be read: the storage failed (a restart may help), or
/// the bytes are not what the header promised (the data is at fault).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Io(String),
    #[error("{0}")]
    Data(String),
}

impl ReadError {
    /// The same error, naming the shard.
    pub fn in_shard(self, name: &str) -> Self {
        match self {
            ReadError::Io(e) => ReadError::Io(format!("{name}: {e}")),
            ReadError::Data(e) => ReadError::Data(format!("{name}: {e}")),
        }
    }
}

impl From<ReadError> for crate::error::RankError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Io(e) => crate::error::RankError::DataUnavailable(e),
            ReadError::Data(e) => crate::error::RankError::Data(e),
        }
    }
}

/// One shard's bytes.
pub trait Blob: Send + Sync {
    /// How errors and logs name it (a path or a URI).
    fn name(&self) -> &str;
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Read each `(offset, len)` range into consecutive parts of `out`
    /// (`out.len()` is the sum of the lengths).
    fn read_ranges(&self, ranges: &[(u64, usize)], out: &mut [u8]) -> io::Result<()>;

    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        self.read_ranges(&[(offset, len)], &mut buf)?;
        Ok(buf)
    }
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

    /// Opens the file again (non-blocking: a FIFO swapped in cannot hang
    /// the reader) and checks, on the descriptor, that it is still the file
    /// first resolved and a regular one.
    fn reopen(&self) -> io::Result<std::fs::File> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&self.real)?;
        let opened = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
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

/// Merge ranges that touch or overlap after sorting; returns the merged
/// ranges. Used to turn a batch's rows into few reads.
pub fn coalesce(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match out.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => out.push((start, end)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_read_in_order_and_merged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b");
        std::fs::write(&path, (0u8..100).collect::<Vec<_>>()).unwrap();
        let blob = LocalBlob::open(path).unwrap();
        assert_eq!(blob.len(), 100);
        let mut out = vec![0u8; 5];
        blob.read_ranges(&[(10, 2), (50, 3)], &mut out).unwrap();
        assert_eq!(out, [10, 11, 50, 51, 52]);
        assert!(blob.read_at(99, 2).is_err(), "a read past the end fails");
        assert_eq!(
            coalesce(vec![(5, 6), (0, 2), (2, 3), (10, 12), (11, 13)]),
            vec![(0, 3), (5, 6), (10, 13)]
        );
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
