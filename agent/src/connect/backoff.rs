//! Reconnect delays: exponential, capped, jittered.

use std::time::Duration;

/// Delays of `initial * 2^n`, capped at `max`, each drawn uniformly from the
/// upper half of that value so that agents restarted together don't dial in
/// lock step.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    current: Duration,
    rng: u64,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
            ^ (u64::from(std::process::id()) << 32);
        Self::with_seed(initial, max, seed)
    }

    pub fn with_seed(initial: Duration, max: Duration, seed: u64) -> Self {
        Self {
            initial,
            max: max.max(initial),
            current: initial,
            rng: seed | 1,
        }
    }

    /// The next delay to wait; each call doubles the base up to the cap.
    pub fn next_delay(&mut self) -> Duration {
        let base = self.current;
        self.current = (self.current * 2).min(self.max);
        let half = base / 2;
        half + half.mul_f64(self.unit())
    }

    /// `around` jittered to a uniform draw from [around/2, around*3/2), so
    /// that agents refused together do not ask again in lock step.
    pub fn jitter(&mut self, around: Duration) -> Duration {
        around / 2 + around.mul_f64(self.unit())
    }

    /// Back to the initial delay, after a session that worked.
    pub fn reset(&mut self) {
        self.current = self.initial;
    }

    /// Uniform in [0, 1] (xorshift64).
    fn unit(&mut self) -> f64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_to_the_cap_with_jitter_and_resets() {
        let mut b = Backoff::with_seed(Duration::from_millis(100), Duration::from_secs(2), 7);
        let mut bases = vec![];
        for _ in 0..10 {
            bases.push(b.current);
            let d = b.next_delay();
            let base = *bases.last().unwrap();
            assert!(d >= base / 2 && d <= base, "{d:?} vs {base:?}");
        }
        assert_eq!(bases[0], Duration::from_millis(100));
        assert_eq!(bases[1], Duration::from_millis(200));
        assert_eq!(*bases.last().unwrap(), Duration::from_secs(2));
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }

    #[test]
    fn a_fixed_pause_is_jittered_around_its_value() {
        let mut b = Backoff::with_seed(Duration::from_millis(100), Duration::from_secs(1), 3);
        let pauses: Vec<_> = (0..50)
            .map(|_| b.jitter(Duration::from_millis(500)))
            .collect();
        assert!(pauses
            .iter()
            .all(|p| *p >= Duration::from_millis(250) && *p < Duration::from_millis(750)));
        assert!(pauses.windows(2).any(|w| w[0] != w[1]));
    }

    #[test]
    fn jitter_differs_between_seeds() {
        let mut a = Backoff::with_seed(Duration::from_secs(1), Duration::from_secs(8), 1);
        let mut b = Backoff::with_seed(Duration::from_secs(1), Duration::from_secs(8), 99);
        let da: Vec<_> = (0..4).map(|_| a.next_delay()).collect();
        let db: Vec<_> = (0..4).map(|_| b.next_delay()).collect();
        assert_ne!(da, db);
    }
}
