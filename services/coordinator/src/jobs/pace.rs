//! A training's pace, from its progress lines: its recent step rate and
//! where it stands against its total steps. The estimates and the
//! reservations read how long it still runs from it. Kept across attempts
//! (a preempted training resumes at the same pace), forgotten with the
//! training.

use std::collections::VecDeque;
use std::time::Duration;
use tokio::time::Instant;

/// (when, step) samples kept for the rate.
const SAMPLES: usize = 32;
/// The rate is measured over this much time at most ("recent").
const WINDOW: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, Default)]
pub struct Pace {
    samples: VecDeque<(Instant, i64)>,
    /// The step the training stops at, when it said.
    pub total: Option<i64>,
}

impl Pace {
    /// A progress line said the training stands at `step` (of `total`).
    pub fn observe(&mut self, now: Instant, step: i64, total: Option<i64>) {
        if let Some(total) = total.filter(|t| *t > 0) {
            self.total = Some(total);
        }
        // A new attempt resumes from a checkpoint: earlier steps.
        if self.samples.back().is_some_and(|(_, s)| *s > step) {
            self.samples.clear();
        }
        self.samples.push_back((now, step));
        while self.samples.len() > SAMPLES
            || self
                .samples
                .front()
                .is_some_and(|(t, _)| now.duration_since(*t) > WINDOW && self.samples.len() > 2)
        {
            self.samples.pop_front();
        }
    }

    /// Steps per second over the recent samples; none before two samples a
    /// second apart with progress between them.
    pub fn rate(&self) -> Option<f64> {
        let (t0, s0) = *self.samples.front()?;
        let (t1, s1) = *self.samples.back()?;
        let secs = t1.duration_since(t0).as_secs_f64();
        (secs >= 1.0 && s1 > s0).then(|| (s1 - s0) as f64 / secs)
    }

    /// The last step it reported.
    pub fn last_step(&self) -> Option<i64> {
        self.samples.back().map(|(_, s)| *s)
    }

    /// How long from `step` to the total at the recent rate.
    pub fn left_from(&self, step: i64) -> Option<Duration> {
        let rate = self.rate()?;
        let left = (self.total? - step).max(0);
        Some(Duration::from_secs_f64(left as f64 / rate))
    }

    /// How long it still runs from `now`: from its last reported step, less
    /// the time since that report.
    pub fn remaining(&self, now: Instant) -> Option<Duration> {
        let (at, step) = *self.samples.back()?;
        Some(self.left_from(step)?.saturating_sub(now.duration_since(at)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_and_what_is_left() {
        let t0 = Instant::now();
        let mut pace = Pace::default();
        pace.observe(t0, 100, Some(1100));
        assert_eq!(pace.rate(), None);
        pace.observe(t0 + Duration::from_secs(10), 200, None);
        assert_eq!(pace.rate(), Some(10.0));
        assert_eq!(pace.left_from(100), Some(Duration::from_secs(100)));
        // 900 steps at 10/s, 5 s after the last report: 85 s.
        assert_eq!(
            pace.remaining(t0 + Duration::from_secs(15)),
            Some(Duration::from_secs(85))
        );
        // A resume from an earlier step starts the samples over; the total stays.
        pace.observe(t0 + Duration::from_secs(20), 150, None);
        assert_eq!((pace.rate(), pace.total), (None, Some(1100)));
        let mut unknown = Pace::default();
        unknown.observe(t0, 1, None);
        unknown.observe(t0 + Duration::from_secs(5), 6, None);
        assert_eq!(unknown.rate(), Some(1.0));
        assert_eq!(unknown.remaining(t0), None);
    }
}
