//! What the last scheduling pass cost: how long it took, how many waiting
//! trainings it looked at, how many pending reasons it rewrote (the
//! Prometheus endpoint shows them; the control bench reads them there).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The last pass, and the slowest since start.
#[derive(Debug, Clone, Default)]
pub struct PassStats {
    inner: Arc<Counters>,
}

#[derive(Debug, Default)]
struct Counters {
    /// The last pass found no GPU free for any rank (no agent, every GPU
    /// held or unhealthy): a new training cannot be placed before something
    /// else changes.
    full: AtomicBool,
    last_us: AtomicU64,
    max_us: AtomicU64,
    looked_at: AtomicU64,
    rewritten: AtomicU64,
    passes: AtomicU64,
}

/// A copy of the figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PassFigures {
    pub last: Duration,
    pub max: Duration,
    /// Waiting trainings the last pass looked at.
    pub looked_at: u64,
    /// Pending reasons the last pass rewrote.
    pub rewritten: u64,
    /// Passes since start.
    pub passes: u64,
}

impl PassStats {
    pub fn record(&self, took: Duration, looked_at: usize, rewritten: usize) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let c = &self.inner;
        c.last_us.store(us, Ordering::Relaxed);
        c.max_us.fetch_max(us, Ordering::Relaxed);
        c.looked_at.store(looked_at as u64, Ordering::Relaxed);
        c.rewritten.store(rewritten as u64, Ordering::Relaxed);
        c.passes.fetch_add(1, Ordering::Relaxed);
    }

    /// Records whether the fleet had no free GPU at the end of a pass.
    pub fn set_full(&self, full: bool) {
        self.inner.full.store(full, Ordering::Relaxed);
    }

    /// Whether the last pass ended with no free GPU.
    pub fn full(&self) -> bool {
        self.inner.full.load(Ordering::Relaxed)
    }

    pub fn figures(&self) -> PassFigures {
        let c = &self.inner;
        PassFigures {
            last: Duration::from_micros(c.last_us.load(Ordering::Relaxed)),
            max: Duration::from_micros(c.max_us.load(Ordering::Relaxed)),
            looked_at: c.looked_at.load(Ordering::Relaxed),
            rewritten: c.rewritten.load(Ordering::Relaxed),
            passes: c.passes.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_and_the_slowest_pass_are_kept() {
        let stats = PassStats::default();
        stats.record(Duration::from_millis(30), 100, 5);
        stats.record(Duration::from_millis(10), 90, 0);
        let f = stats.figures();
        assert_eq!(f.last, Duration::from_millis(10));
        assert_eq!(f.max, Duration::from_millis(30));
        assert_eq!((f.looked_at, f.rewritten, f.passes), (90, 0, 2));
    }
}
