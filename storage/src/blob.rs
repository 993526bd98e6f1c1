//! One shard's bytes, read by ranges and never whole.

use std::io;

/// A file or an object.
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

    /// Whether reads are slow to start (a network round trip each), so a
    /// reader should keep several in flight ahead of its consumer.
    fn remote(&self) -> bool {
        false
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
    #[test]
    fn ranges_merge() {
        assert_eq!(
            super::coalesce(vec![(5, 6), (0, 2), (2, 3), (10, 12), (11, 13)]),
            vec![(0, 3), (5, 6), (10, 13)]
        );
    }
}
