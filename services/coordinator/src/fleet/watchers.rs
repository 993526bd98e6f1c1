//! How many WatchGpuMetrics streams are open, and how often one fell behind
//! the live fan-out (for the Prometheus endpoint and OpenTelemetry metrics).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Debug, Clone, Default)]
pub struct WatcherStats {
    open: Arc<AtomicU64>,
    lag_notices: Arc<AtomicU64>,
    missed_batches: Arc<AtomicU64>,
}

/// What [`WatcherStats`] counted so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatcherCounts {
    /// Streams open now.
    pub open: u64,
    /// Lag notices sent since start (each: a watcher fell behind once).
    pub lag_notices: u64,
    /// Telemetry batches watchers missed in all.
    pub missed_batches: u64,
}

impl WatcherStats {
    /// Counts a stream as open until the guard drops.
    pub fn open(&self) -> WatcherGuard {
        self.open.fetch_add(1, Ordering::Relaxed);
        WatcherGuard(self.clone())
    }

    /// A watcher fell behind and missed `missed` batches.
    pub fn lagged(&self, missed: u64) {
        self.lag_notices.fetch_add(1, Ordering::Relaxed);
        self.missed_batches.fetch_add(missed, Ordering::Relaxed);
    }

    pub fn counts(&self) -> WatcherCounts {
        WatcherCounts {
            open: self.open.load(Ordering::Relaxed),
            lag_notices: self.lag_notices.load(Ordering::Relaxed),
            missed_batches: self.missed_batches.load(Ordering::Relaxed),
        }
    }
}

/// An open watcher; closes it when dropped.
#[derive(Debug)]
pub struct WatcherGuard(WatcherStats);

impl WatcherGuard {
    /// This watcher fell behind and missed `missed` batches.
    pub fn lagged(&self, missed: u64) {
        self.0.lagged(missed);
    }
}

impl Drop for WatcherGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards_count_open_watchers_and_lag_adds_up() {
        let stats = WatcherStats::default();
        let a = stats.open();
        let b = stats.open();
        assert_eq!(stats.counts().open, 2);
        drop(a);
        stats.lagged(3);
        stats.lagged(4);
        assert_eq!(
            stats.counts(),
            WatcherCounts {
                open: 1,
                lag_notices: 2,
                missed_batches: 7
            }
        );
        drop(b);
        assert_eq!(stats.counts().open, 0);
    }
}
