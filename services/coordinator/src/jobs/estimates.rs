//! Start and end estimates: at most every `estimate_interval`, off the
//! request path, the policy is run forward ([`crate::policy::forecast`])
//! over a fresh snapshot on a blocking thread; estimates that appeared,
//! went, or moved by more than 10 % of the time left to them are written
//! (so every coordinator answers with them), with an `estimate` event for
//! watchers when a stored one changed (a training's first estimate is only
//! stored). What one run cost is kept for the metrics.

use super::Jobs;
use crate::persistence::estimates::{EstimateWrite, StoredEstimate};
use crate::persistence::DatabaseError;
use crate::policy::{forecast, Estimate, Forecast, Horizon};
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// An estimate moves when it changes by more than this share of the time
/// left to it...
const MOVE_SHARE: f64 = 0.10;
/// ...and by more than this (seconds), so one close at hand does not churn.
const MOVE_FLOOR_S: f64 = 10.0;

/// What one estimate run cost.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EstimateFigures {
    pub trainings: usize,
    pub passes: usize,
    pub took: Duration,
    /// The forward run of the policy (on a blocking thread).
    pub forecast: Duration,
    pub written: usize,
}

/// The estimates last written (loaded from the database on the first run
/// after a start or takeover), and the last run's figures.
#[derive(Debug, Clone, Default)]
pub struct EstimateCache {
    kept: Arc<Mutex<Option<HashMap<String, StoredEstimate>>>>,
    figures: Arc<Mutex<EstimateFigures>>,
}

/// Whether `new` is worth writing over `old` at `now`.
fn moved(old: &StoredEstimate, new: &StoredEstimate, now: DateTime<Utc>) -> bool {
    let far = |a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>| match (a, b) {
        (None, None) => false,
        (Some(a), Some(b)) => {
            let left = (a - now).num_milliseconds().max(0) as f64 / 1e3;
            let delta = (a - b).num_milliseconds().abs() as f64 / 1e3;
            delta > (left * MOVE_SHARE).max(MOVE_FLOOR_S)
        }
        _ => true,
    };
    old.reason != new.reason
        || far(old.start_time, new.start_time)
        || far(old.end_time, new.end_time)
}

/// The estimate of a waiting (`waiting`) or running training.
fn estimate_of(f: &Forecast, id: &str, waiting: bool) -> StoredEstimate {
    let start = waiting.then(|| f.starts.get(id)).flatten();
    let end = f.ends.get(id);
    let reason = [start, end]
        .into_iter()
        .flatten()
        .find_map(|e| match e {
            Estimate::Unknown(why) => Some(why.clone()),
            Estimate::At(_) => None,
        })
        .unwrap_or_default();
    StoredEstimate {
        start_time: start.and_then(Estimate::at),
        end_time: end.and_then(Estimate::at),
        // A waiting training's end is known only once its start is.
        reason: if waiting && start.and_then(Estimate::at).is_some() && end.is_none() {
            String::new()
        } else {
            reason
        },
    }
}

impl Jobs {
    /// The last estimate run's figures.
    pub fn estimate_figures(&self) -> EstimateFigures {
        *self
            .estimates
            .figures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Recomputes the estimates every `estimate_interval` (at least twice
    /// as long as the last run took) until `shutdown`.
    pub async fn estimate_loop(self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            let pause = match self.estimate_once().await {
                Ok(f) => self.settings.estimate_interval.max(f.took * 2),
                Err(e) => {
                    tracing::warn!(error = %e, "estimates failed");
                    self.settings.estimate_interval
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = &mut shutdown => return,
            }
        }
    }

    /// One estimate run: forecast, then write what moved.
    pub async fn estimate_once(&self) -> Result<EstimateFigures, DatabaseError> {
        let began = std::time::Instant::now();
        let built = self.snapshot(false).await?;
        let waiting: Vec<(String, i32)> = built
            .snapshot
            .waiting
            .iter()
            .map(|w| (w.job.id.clone(), w.attempt))
            .collect();
        let running: Vec<(String, i32)> = built.attempts.clone().into_iter().collect();
        let policy = self.settings.policy.clone();
        let half_life = self.settings.fair_share_half_life;
        let snapshot = built.snapshot;
        let (f, forecast_took) = tokio::task::spawn_blocking(move || {
            let began = std::time::Instant::now();
            let f = forecast(snapshot, &policy, half_life, Horizon::default());
            (f, began.elapsed())
        })
        .await
        .map_err(|e| DatabaseError::Task(format!("the forecast panicked: {e}")))?;
        let mut kept = match self.kept_estimates() {
            Some(kept) => kept,
            None => self.db.all_estimates().await?,
        };
        let now = Utc::now();
        let mut changed = Vec::new();
        let mut current = HashMap::with_capacity(waiting.len() + running.len());
        for (id, attempt, is_waiting) in waiting
            .into_iter()
            .map(|(i, a)| (i, a, true))
            .chain(running.into_iter().map(|(i, a)| (i, a, false)))
        {
            let new = estimate_of(&f, &id, is_waiting);
            let old = kept.remove(&id);
            match old {
                Some(old) if !moved(&old, &new, now) => {
                    current.insert(id, old);
                }
                old => {
                    changed.push(EstimateWrite {
                        training_id: id.clone(),
                        attempt,
                        estimate: new.clone(),
                        event: old.is_some(),
                    });
                    current.insert(id, new);
                }
            }
        }
        let gone: Vec<String> = kept.into_keys().collect();
        let written = changed.len();
        if !changed.is_empty() || !gone.is_empty() {
            self.db.write_estimates(changed, gone).await?;
        }
        *self
            .estimates
            .kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(current);
        let figures = EstimateFigures {
            trainings: f.starts.len() + f.ends.len(),
            passes: f.passes,
            took: began.elapsed(),
            forecast: forecast_took,
            written,
        };
        *self
            .estimates
            .figures
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = figures;
        tracing::debug!(
            passes = figures.passes,
            took_ms = figures.took.as_millis() as u64,
            forecast_ms = figures.forecast.as_millis() as u64,
            written,
            "estimates"
        );
        Ok(figures)
    }

    fn kept_estimates(&self) -> Option<HashMap<String, StoredEstimate>> {
        self.estimates
            .kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Option<DateTime<Utc>> {
        DateTime::from_timestamp(1_000_000 + s, 0)
    }

    #[test]
    fn an_estimate_moves_past_ten_percent_of_the_time_left() {
        let now = at(0).unwrap();
        let e = |start: Option<DateTime<Utc>>, reason: &str| StoredEstimate {
            start_time: start,
            end_time: None,
            reason: reason.into(),
        };
        // 1000 s away: 90 s is within 10 %, 110 s is not.
        assert!(!moved(&e(at(1000), ""), &e(at(1090), ""), now));
        assert!(moved(&e(at(1000), ""), &e(at(1110), ""), now));
        // Close at hand the floor holds.
        assert!(!moved(&e(at(20), ""), &e(at(28), ""), now));
        // Appearing, going and a new reason all count.
        assert!(moved(&e(None, "NO_DURATION: x"), &e(at(10), ""), now));
        assert!(moved(&e(at(10), ""), &e(None, "NO_DURATION: x"), now));
    }
}
