//! What the coordinator learns from a running attempt's reports: when it last
//! heard from it (for hang detection), its step times (for the hang deadline)
//! and which ranks straggle. In memory; rebuilt from fresh reports after a
//! coordinator restart.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;
use tokio::time::Instant;

/// Reports in a row above the threshold before a rank counts as a straggler.
pub const STRAGGLER_REPORTS: u32 = 3;
/// A rank straggles when its compute time exceeds this multiple of the median.
pub const STRAGGLER_RATIO: f64 = 1.5;
/// Step times kept for the median.
const HISTORY: usize = 64;

#[derive(Debug)]
pub struct AttemptProgress {
    pub attempt: i32,
    /// Ranks of the attempt: a step's stats are complete when all reported.
    pub world_size: usize,
    pub last_report: Instant,
    pub log_every_steps: i64,
    /// A program's own rule: `Some(None)` never hangs, `Some(Some(d))`
    /// hangs after `d` of silence; `None` (the SAE) measures its deadline.
    pub fixed_deadline: Option<Option<Duration>>,
    step_times_ms: Vec<f64>,
    /// Latest compute time per rank, with the step it was reported at.
    compute_ms: BTreeMap<i32, (i64, f64)>,
    above: HashMap<i32, u32>,
    pub stragglers: Vec<i32>,
}

pub use crate::model::StragglerChange;

fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let n = values.len();
    Some(if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    })
}

impl AttemptProgress {
    pub fn new(attempt: i32, world_size: usize, log_every_steps: i64, now: Instant) -> Self {
        Self {
            attempt,
            world_size,
            last_report: now,
            log_every_steps: log_every_steps.max(1),
            fixed_deadline: None,
            step_times_ms: Vec::new(),
            compute_ms: BTreeMap::new(),
            above: HashMap::new(),
            stragglers: Vec::new(),
        }
    }

    pub fn heard(&mut self, now: Instant) {
        self.last_report = now;
    }

    pub fn median_step_ms(&self) -> Option<f64> {
        median(&mut self.step_times_ms.clone())
    }

    /// How long silence may last before the attempt counts as hung:
    /// max(factor x the time between two reports, floor). Before any step
    /// time is known, the floor.
    /// A program's deadline is its `heartbeat_timeout` (none: never).
    pub fn hang_deadline(&self, factor: f64, floor: Duration) -> Duration {
        if let Some(fixed) = self.fixed_deadline {
            return fixed.unwrap_or(Duration::MAX);
        }
        match self.median_step_ms() {
            Some(ms) => {
                let between_reports = ms * self.log_every_steps as f64 / 1e3;
                floor.max(Duration::from_secs_f64(
                    (between_reports * factor).min(86_400.0),
                ))
            }
            None => floor,
        }
    }

    /// A rank's stats; returns straggler changes decided by this report.
    pub fn rank_stats(
        &mut self,
        rank: i32,
        step: i64,
        step_time_ms: f64,
        compute_ms: f64,
    ) -> Vec<StragglerChange> {
        let world_size = self.world_size;
        self.step_times_ms.push(step_time_ms);
        if self.step_times_ms.len() > HISTORY {
            self.step_times_ms.remove(0);
        }
        self.compute_ms.insert(rank, (step, compute_ms));
        // decide once every rank has reported this step
        let same_step: Vec<(i32, f64)> = self
            .compute_ms
            .iter()
            .filter(|(_, (s, _))| *s == step)
            .map(|(r, (_, c))| (*r, *c))
            .collect();
        if world_size < 2 || same_step.len() < world_size {
            return Vec::new();
        }
        let Some(med) = median(&mut same_step.iter().map(|(_, c)| *c).collect::<Vec<_>>()) else {
            return Vec::new();
        };
        let mut changes = Vec::new();
        for (r, c) in same_step {
            let slow = med > 0.0 && c > STRAGGLER_RATIO * med;
            let count = self.above.entry(r).or_default();
            *count = if slow { *count + 1 } else { 0 };
            let listed = self.stragglers.contains(&r);
            if slow && *count >= STRAGGLER_REPORTS && !listed {
                self.stragglers.push(r);
                self.stragglers.sort_unstable();
                changes.push(StragglerChange {
                    rank: r,
                    step,
                    compute_ms: c,
                    median_compute_ms: med,
                    straggling: true,
                });
            } else if !slow && listed {
                self.stragglers.retain(|x| *x != r);
                changes.push(StragglerChange {
                    rank: r,
                    step,
                    compute_ms: c,
                    median_compute_ms: med,
                    straggling: false,
                });
            }
        }
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_hangs_after_its_heartbeat_timeout_or_never() {
        let mut p = AttemptProgress::new(1, 2, 1, Instant::now());
        p.fixed_deadline = Some(Some(Duration::from_secs(600)));
        let floor = Duration::from_secs(20);
        assert_eq!(p.hang_deadline(5.0, floor), Duration::from_secs(600));
        p.fixed_deadline = Some(None);
        assert_eq!(p.hang_deadline(5.0, floor), Duration::MAX);
    }

    #[test]
    fn hang_deadline_scales_with_step_time_above_a_floor() {
        let now = Instant::now();
        let mut p = AttemptProgress::new(1, 2, 10, now);
        let floor = Duration::from_secs(20);
        assert_eq!(p.hang_deadline(5.0, floor), floor);
        for r in 0..2 {
            p.rank_stats(r, 10, 1000.0, 900.0); // 1 s per step, 10 steps between reports
        }
        assert_eq!(p.hang_deadline(5.0, floor), Duration::from_secs(50));
    }

    #[test]
    fn a_rank_slower_than_1_5x_the_median_three_times_straggles_until_it_recovers() {
        let mut p = AttemptProgress::new(1, 4, 10, Instant::now());
        let mut changes = Vec::new();
        for step in [10, 20, 30] {
            for (rank, c) in [(0, 10.0), (1, 10.0), (2, 11.0), (3, 20.0)] {
                changes.extend(p.rank_stats(rank, step, 25.0, c));
            }
        }
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert!(changes[0].straggling && changes[0].rank == 3 && changes[0].step == 30);
        assert_eq!(p.stragglers, vec![3]);
        for (rank, c) in [(0, 10.0), (1, 10.0), (2, 11.0), (3, 10.5)] {
            changes.extend(p.rank_stats(rank, 40, 12.0, c));
        }
        assert!(!changes[1].straggling && changes[1].rank == 3);
        assert!(p.stragglers.is_empty());
    }
}
