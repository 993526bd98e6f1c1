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
/// thousands of shards hold no file descriptors between reads.
pub struct LocalBlob {
    path: PathBuf,
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
            path,
            len: meta.len(),
        })
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
        let file = std::fs::File::open(&self.path)?;
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
}
