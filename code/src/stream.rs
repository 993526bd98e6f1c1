//! Small `Read`/`Write` adapters: hashing the archive as it is written,
//! reading a file exactly as large as its header says, and bounding how much
//! an untrusted archive may decompress between entries.

use std::cell::Cell;
use std::io::{self, Read, Take, Write};
use std::rc::Rc;

use crate::Digest;

/// Passes writes through to `inner`, hashing and counting what it accepted.
pub(crate) struct HashingWriter<W> {
    inner: W,
    digest: Digest,
    bytes: u64,
    failed: bool,
}

impl<W: Write> HashingWriter<W> {
    pub(crate) fn new(inner: W) -> Self {
        Self {
            inner,
            digest: Digest::new(),
            bytes: 0,
            failed: false,
        }
    }

    /// Whether a write to (or flush of) the inner writer failed.
    pub(crate) fn failed(&self) -> bool {
        self.failed
    }

    /// The hex digest and the byte count of everything written.
    pub(crate) fn finish(self) -> (String, u64) {
        (self.digest.finish(), self.bytes)
    }

    fn note<T>(&mut self, result: io::Result<T>) -> io::Result<T> {
        if let Err(e) = &result {
            self.failed |= e.kind() != io::ErrorKind::Interrupted;
        }
        result
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let result = self.inner.write(buf);
        let n = self.note(result)?.min(buf.len());
        self.digest.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        let result = self.inner.flush();
        self.note(result)
    }
}

/// Yields exactly `size` bytes of `inner`: more is cut off, fewer is an
/// error (the file shrank between the walk and the read).
pub(crate) struct ExactReader<R> {
    inner: Take<R>,
}

impl<R: Read> ExactReader<R> {
    pub(crate) fn new(inner: R, size: u64) -> Self {
        Self {
            inner: inner.take(size),
        }
    }
}

impl<R: Read> Read for ExactReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && !buf.is_empty() && self.inner.limit() > 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file shrank while it was being packed",
            ));
        }
        Ok(n)
    }
}

/// How many decompressed bytes the archive may still yield; shared between
/// a [`GuardedReader`] (owned by the tar reader) and the unpack loop.
#[derive(Clone, Default)]
pub(crate) struct Budget(Rc<BudgetState>);

#[derive(Default)]
struct BudgetState {
    left: Cell<u64>,
    tripped: Cell<bool>,
}

impl Budget {
    pub(crate) fn new(bytes: u64) -> Self {
        let budget = Self::default();
        budget.0.left.set(bytes);
        budget
    }

    /// Replaces what is left with `bytes`.
    pub(crate) fn reset(&self, bytes: u64) {
        self.0.left.set(bytes);
    }

    /// Whether a read was refused for want of budget.
    pub(crate) fn tripped(&self) -> bool {
        self.0.tripped.get()
    }
}

/// A reader that fails once its [`Budget`] is spent.
pub(crate) struct GuardedReader<R> {
    inner: R,
    budget: Budget,
}

impl<R: Read> GuardedReader<R> {
    pub(crate) fn new(inner: R, budget: Budget) -> Self {
        Self { inner, budget }
    }
}

impl<R: Read> Read for GuardedReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.budget.0.left.get();
        if left == 0 && !buf.is_empty() {
            self.budget.0.tripped.set(true);
            return Err(io::Error::other(
                "the archive's entry metadata is too large",
            ));
        }
        let len = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..len])?;
        self.budget.0.left.set(left.saturating_sub(n as u64));
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashing_writer_hashes_and_counts() {
        let mut w = HashingWriter::new(Vec::new());
        w.write_all(b"ab").unwrap();
        w.write_all(b"c").unwrap();
        assert!(!w.failed());
        let (hex, n) = w.finish();
        assert_eq!(hex, crate::sha256_hex(b"abc"));
        assert_eq!(n, 3);
    }

    #[test]
    fn exact_reader_cuts_and_refuses_short() {
        let mut out = Vec::new();
        ExactReader::new(&b"abcdef"[..], 3)
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, b"abc");
        let err = ExactReader::new(&b"ab"[..], 3)
            .read_to_end(&mut Vec::new())
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn guarded_reader_stops_at_budget() {
        let budget = Budget::new(4);
        let mut r = GuardedReader::new(&b"abcdef"[..], budget.clone());
        let mut buf = [0u8; 8];
        assert_eq!(r.read(&mut buf).unwrap(), 4);
        assert!(r.read(&mut buf).is_err());
        assert!(budget.tripped());
        budget.reset(2);
        assert_eq!(r.read(&mut buf).unwrap(), 2);
    }
}
