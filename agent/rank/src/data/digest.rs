//! Which samples a step read, as a digest that depends neither on their
//! order nor on how they were split over ranks and micro-batches: for each
//! sample id, two 24-bit pieces of a mix of it, summed. The sums are exact
//! in f64 (below 2^29 samples a step), so they travel with the step's
//! other metric sums through the same all-reduce, and two runs read the
//! same samples at a step exactly when their digests agree (but for a
//! collision of two 48-bit sums). Progress lines carry it on logged steps
//! (`samples_digest`): an elastic run's steps can be checked against a
//! fixed run's, whatever its sizes.

use super::sampler::mix;

/// The two partial sums of `ids`.
pub fn parts(ids: &[u64]) -> [f64; 2] {
    let mut lo = 0u64;
    let mut hi = 0u64;
    for &id in ids {
        let m = mix(id ^ 0x5eed_d16e_57c0_4a11);
        lo += m & 0xff_ffff;
        hi += (m >> 24) & 0xff_ffff;
    }
    [lo as f64, hi as f64]
}

/// The digest of reduced sums: 16 hex digits.
pub fn digest([lo, hi]: [f64; 2]) -> String {
    let (lo, hi) = (lo as u64 & 0xffff_ffff, hi as u64 & 0xffff_ffff);
    format!("{:016x}", (hi << 32) | lo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_of_the_set_however_it_is_split() {
        let ids: Vec<u64> = (0..96).map(|i| i * 7 + 3).collect();
        let whole = digest(parts(&ids));
        // Four ranks of two micro-batches each, in another order.
        let mut sum = [0.0, 0.0];
        for chunk in ids.rchunks(12) {
            let p = parts(chunk);
            sum = [sum[0] + p[0], sum[1] + p[1]];
        }
        assert_eq!(digest(sum), whole);
        let mut other = ids.clone();
        other[5] += 1;
        assert_ne!(digest(parts(&other)), whole);
        assert_eq!(whole.len(), 16);
    }
}
