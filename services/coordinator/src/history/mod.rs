//! GPU telemetry history: every sample the fleet ingests is written to
//! `gpu_metrics` by a batched [`writer`]; [`retention`] folds samples older
//! than the raw window into 1-minute rollups (`gpu_metrics_rollup`) and
//! expires both. Queries live in `api::telemetry::query`. The operator's
//! view is docs/operations.md, "GPU telemetry history".

pub mod clock;
pub mod retention;
pub mod writer;

pub use clock::{Clock, FakeClock, SystemClock};
pub use retention::Retention;

use crate::fleet::Fleet;
use crate::persistence::Persistence;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Default raw sample window (`--metrics-raw-retention`).
pub const RAW_RETENTION_DEFAULT: Duration = Duration::from_secs(24 * 3600);
/// Default rollup window (`--metrics-rollup-retention`).
pub const ROLLUP_RETENTION_DEFAULT: Duration = Duration::from_secs(30 * 24 * 3600);

/// How the history is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistorySettings {
    /// Raw samples older than this become 1-minute rollups.
    pub raw_retention: Duration,
    /// Rollups older than this are deleted.
    pub rollup_retention: Duration,
    /// How often the writer flushes its buffer.
    pub flush_interval: Duration,
    /// The writer flushes at once when it holds this many rows.
    pub flush_rows: usize,
    /// How often the retention task runs.
    pub retention_interval: Duration,
}

impl Default for HistorySettings {
    fn default() -> Self {
        Self {
            raw_retention: RAW_RETENTION_DEFAULT,
            rollup_retention: ROLLUP_RETENTION_DEFAULT,
            flush_interval: Duration::from_millis(250),
            flush_rows: 2000,
            retention_interval: Duration::from_secs(60),
        }
    }
}

impl HistorySettings {
    /// The windows must hold at least one whole rollup minute, and rollups
    /// must outlive raw samples.
    pub fn validate(&self) -> Result<(), String> {
        if self.raw_retention < Duration::from_secs(60) {
            return Err("the raw metrics retention must be at least 1m".into());
        }
        if self.rollup_retention < self.raw_retention {
            return Err("the rollup metrics retention must be at least the raw retention".into());
        }
        Ok(())
    }
}

/// Counters of the history writer.
#[derive(Debug, Default)]
pub struct WriterStats {
    /// Rows committed to `gpu_metrics`.
    pub written_rows: AtomicU64,
    /// Flush transactions committed.
    pub flushes: AtomicU64,
    /// Rows dropped because the flusher was behind.
    pub dropped_rows: AtomicU64,
    /// Rows lost because their flush failed.
    pub failed_rows: AtomicU64,
    /// Telemetry batches the collector missed on the broadcast (it lagged).
    pub lagged_batches: AtomicU64,
}

/// A copy of [`WriterStats`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterCounts {
    pub written_rows: u64,
    pub flushes: u64,
    pub dropped_rows: u64,
    pub failed_rows: u64,
    pub lagged_batches: u64,
}

impl WriterStats {
    pub fn counts(&self) -> WriterCounts {
        WriterCounts {
            written_rows: self.written_rows.load(Ordering::Relaxed),
            flushes: self.flushes.load(Ordering::Relaxed),
            dropped_rows: self.dropped_rows.load(Ordering::Relaxed),
            failed_rows: self.failed_rows.load(Ordering::Relaxed),
            lagged_batches: self.lagged_batches.load(Ordering::Relaxed),
        }
    }
}

/// The history's configuration and counters, shared through `context::Context`.
#[derive(Debug, Clone)]
pub struct History {
    pub settings: HistorySettings,
    pub clock: Arc<dyn Clock>,
    stats: Arc<WriterStats>,
}

impl Default for History {
    fn default() -> Self {
        Self::new(HistorySettings::default(), Arc::new(SystemClock))
    }
}

impl History {
    pub fn new(settings: HistorySettings, clock: Arc<dyn Clock>) -> Self {
        Self {
            settings,
            clock,
            stats: Arc::default(),
        }
    }

    /// The writer's counters (rows written, dropped, ...).
    pub fn stats(&self) -> WriterCounts {
        self.stats.counts()
    }

    /// Starts the writer and the retention task; they run until
    /// [`Running::stop`].
    pub fn start(&self, db: Persistence, fleet: Fleet) -> Running {
        let (stop, stopped) = watch::channel(false);
        // Subscribed before returning, so no sample ingested after start is missed.
        let writer = tokio::spawn(writer::run(
            db.clone(),
            fleet.subscribe_telemetry(),
            self.settings.clone(),
            self.stats.clone(),
            stopped.clone(),
        ));
        let retention = Retention::new(db, self.clock.clone(), self.settings.clone());
        let retention = tokio::spawn(retention.run(stopped));
        Running {
            stop,
            tasks: vec![writer, retention],
        }
    }
}

/// The running history tasks.
#[derive(Debug)]
pub struct Running {
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Stops both tasks; the writer first flushes what it holds.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// Resolves when `stop` turns true (or its sender is gone).
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await.map(|_| ());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_validation() {
        assert!(HistorySettings::default().validate().is_ok());
        let short = HistorySettings {
            raw_retention: Duration::from_secs(30),
            ..Default::default()
        };
        assert!(short.validate().unwrap_err().contains("at least 1m"));
        let inverted = HistorySettings {
            raw_retention: Duration::from_secs(7200),
            rollup_retention: Duration::from_secs(3600),
            ..Default::default()
        };
        assert!(inverted.validate().unwrap_err().contains("rollup"));
    }
}
