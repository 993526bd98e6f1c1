//! A log-linear latency histogram in microseconds: exact below 128 µs, then
//! 64 sub-buckets per power of two (relative error under 1.6 %), so a watcher
//! can record millions of latencies in a few kilobytes.

const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;
/// Values below this are their own bucket.
const LINEAR: u64 = 2 * SUB;
const BUCKETS: usize = (LINEAR + (64 - SUB_BITS as u64 - 1) * SUB) as usize;

#[derive(Debug, Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: vec![0; BUCKETS],
            total: 0,
            max: 0,
        }
    }
}

fn index(v: u64) -> usize {
    if v < LINEAR {
        return v as usize;
    }
    // v = 1.m * 2^e with e >= SUB_BITS + 1; keep SUB_BITS bits of m.
    let e = 63 - v.leading_zeros() as u64;
    let mantissa = (v >> (e - SUB_BITS as u64)) - SUB;
    (LINEAR + (e - SUB_BITS as u64 - 1) * SUB + mantissa) as usize
}

/// The largest value that falls in bucket `i`.
fn upper(i: usize) -> u64 {
    let i = i as u64;
    if i < LINEAR {
        return i;
    }
    let e = (i - LINEAR) / SUB + SUB_BITS as u64 + 1;
    let mantissa = (i - LINEAR) % SUB + SUB;
    let low = mantissa << (e - SUB_BITS as u64);
    low + ((1u64 << (e - SUB_BITS as u64)) - 1)
}

impl Histogram {
    pub fn record(&mut self, micros: u64) {
        self.counts[index(micros)] += 1;
        self.total += 1;
        self.max = self.max.max(micros);
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
        self.max = self.max.max(other.max);
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    /// The value at quantile `q` (0..=1): the upper edge of its bucket,
    /// never above the largest value recorded; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return upper(i).min(self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_cover_u64() {
        for i in 0..BUCKETS - 1 {
            assert_eq!(index(upper(i)), i, "upper edge of {i}");
            assert_eq!(index(upper(i) + 1), i + 1, "first value after {i}");
        }
        assert_eq!(index(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_are_within_the_bucket_error() {
        let mut h = Histogram::default();
        for v in 1..=100_000u64 {
            h.record(v);
        }
        for (q, exact) in [(0.5, 50_000u64), (0.99, 99_000), (1.0, 100_000)] {
            let got = h.quantile(q);
            assert!(
                got >= exact && got as f64 <= exact as f64 * 1.016,
                "q{q}: {got}"
            );
        }
        assert_eq!(h.max(), 100_000);
        let mut small = Histogram::default();
        small.record(7);
        small.merge(&h);
        assert_eq!(small.count(), 100_001);
        assert_eq!(small.quantile(0.0), 1);
        assert_eq!(Histogram::default().quantile(0.5), 0);
    }
}
