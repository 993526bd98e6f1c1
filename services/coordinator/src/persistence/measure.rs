//! Every persistence operation is named (`op`); each run of one is measured
//! here: a latency histogram and an error count per operation, read by the
//! Prometheus endpoint and, through an observer, recorded to OTLP. The
//! operation names are the `&'static str`s in this crate's code, so the map
//! stays small whatever clients send.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Upper bounds (seconds) of the latency histogram's buckets.
pub const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// One operation's tallies since start.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OpStats {
    /// Runs, successful or not (retries within a run count once).
    pub count: u64,
    /// Runs that ended in an error.
    pub errors: u64,
    /// Total latency of all runs, in seconds.
    pub sum_seconds: f64,
    /// Runs at or below each of [`BUCKETS`] (cumulative, as Prometheus wants).
    pub buckets: [u64; BUCKETS.len()],
}

/// Told of every run: (operation, latency, succeeded).
pub type Observer = Arc<dyn Fn(&'static str, Duration, bool) + Send + Sync>;

/// The per-operation tallies. Cheap to clone (shared).
#[derive(Clone, Default)]
pub struct OpMetrics {
    ops: Arc<Mutex<BTreeMap<&'static str, OpStats>>>,
    observer: Arc<Mutex<Option<Observer>>>,
}

impl std::fmt::Debug for OpMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpMetrics").finish_non_exhaustive()
    }
}

impl OpMetrics {
    pub fn record(&self, op: &'static str, elapsed: Duration, ok: bool) {
        let seconds = elapsed.as_secs_f64();
        {
            let mut ops = self.ops.lock().unwrap_or_else(|p| p.into_inner());
            let stats = ops.entry(op).or_default();
            stats.count += 1;
            stats.errors += u64::from(!ok);
            stats.sum_seconds += seconds;
            for (bound, n) in BUCKETS.iter().zip(stats.buckets.iter_mut()) {
                *n += u64::from(seconds <= *bound);
            }
        }
        let observer = self
            .observer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(observer) = observer {
            observer(op, elapsed, ok);
        }
    }

    /// Every operation run so far, by name.
    pub fn snapshot(&self) -> Vec<(&'static str, OpStats)> {
        let ops = self.ops.lock().unwrap_or_else(|p| p.into_inner());
        ops.iter().map(|(op, s)| (*op, s.clone())).collect()
    }

    /// Runs of `op` so far.
    pub fn count(&self, op: &str) -> u64 {
        let ops = self.ops.lock().unwrap_or_else(|p| p.into_inner());
        ops.get(op).map_or(0, |s| s.count)
    }

    /// Runs of every operation so far.
    pub fn total(&self) -> u64 {
        let ops = self.ops.lock().unwrap_or_else(|p| p.into_inner());
        ops.values().map(|s| s.count).sum()
    }

    /// Tell `observer` of every run from now on (the OTLP histogram).
    pub fn observe(&self, observer: Observer) {
        *self.observer.lock().unwrap_or_else(|p| p.into_inner()) = Some(observer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_counted_per_operation_in_cumulative_buckets() {
        let m = OpMetrics::default();
        m.record("get_training", Duration::from_micros(700), true);
        m.record("get_training", Duration::from_millis(30), false);
        m.record("list_trainings", Duration::from_secs(9), true);
        let all = m.snapshot();
        assert_eq!(all.len(), 2);
        let (op, get) = &all[0];
        assert_eq!(*op, "get_training");
        assert_eq!((get.count, get.errors), (2, 1));
        assert_eq!(get.buckets[0], 0, "700 us is above 0.5 ms");
        assert_eq!(get.buckets[1], 1, "and within 1 ms");
        assert_eq!(get.buckets[6], 2, "both within 50 ms");
        assert_eq!(
            all[1].1.buckets[BUCKETS.len() - 1],
            0,
            "9 s is beyond every bucket"
        );
        assert_eq!(m.total(), 3);
        assert_eq!(m.count("list_trainings"), 1);
    }
}
