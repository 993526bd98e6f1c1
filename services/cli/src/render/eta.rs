//! The time left of a training, from its recent step rate: the steps and
//! times of the last progress lines (at most [`WINDOW`] of them, so a change
//! of pace shows within a few lines).

use std::collections::VecDeque;
use std::time::Duration;

/// Progress lines the rate is taken over.
pub const WINDOW: usize = 20;

#[derive(Debug, Default, Clone)]
pub struct Eta {
    seen: VecDeque<(f64, i64)>,
}

impl Eta {
    /// A progress line: its time (seconds) and step. A step lower than the
    /// last (a restart from a checkpoint) starts the window again.
    pub fn observe(&mut self, at_s: f64, step: i64) {
        if self.seen.back().is_some_and(|&(_, last)| step < last) {
            self.seen.clear();
        }
        self.seen.push_back((at_s, step));
        if self.seen.len() > WINDOW {
            self.seen.pop_front();
        }
    }

    /// The time to reach `total` at the recent rate; `None` without a rate.
    pub fn left(&self, total: i64) -> Option<Duration> {
        let (&(t0, s0), &(t1, s1)) = (self.seen.front()?, self.seen.back()?);
        let (dt, ds) = (t1 - t0, (s1 - s0) as f64);
        if dt <= 0.0 || ds <= 0.0 || total <= s1 {
            return None;
        }
        Some(Duration::from_secs_f64((total - s1) as f64 * dt / ds))
    }

    /// `  ETA 3m 12s`, or nothing.
    pub fn suffix(&self, total: i64) -> String {
        self.left(total)
            .map(|d| format!("  ETA {}", human(d)))
            .unwrap_or_default()
    }
}

/// `45s`, `3m 12s`, `2h 05m`.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recent_rate_gives_the_time_left() {
        let mut eta = Eta::default();
        assert_eq!(eta.left(100), None);
        eta.observe(0.0, 0);
        assert_eq!(eta.left(100), None, "one line is no rate");
        eta.observe(10.0, 10);
        assert_eq!(eta.left(100), Some(Duration::from_secs(90)));
        assert_eq!(eta.suffix(100), "  ETA 1m 30s");
        assert_eq!(eta.left(10), None, "done");
    }

    #[test]
    fn a_restart_starts_the_window_again_and_old_lines_leave_it() {
        let mut eta = Eta::default();
        eta.observe(0.0, 0);
        eta.observe(100.0, 1000);
        eta.observe(200.0, 500); // restarted from step 500
        assert_eq!(eta.left(1000), None);
        eta.observe(201.0, 510);
        assert_eq!(eta.left(1000), Some(Duration::from_secs(49)));
        for i in 0..(WINDOW as i64 * 2) {
            eta.observe(300.0 + i as f64, 600 + 100 * i); // much faster now
        }
        assert_eq!(
            eta.left(600 + 100 * (WINDOW as i64 * 2 - 1) + 1000),
            Some(Duration::from_secs(10))
        );
        assert_eq!(human(Duration::from_secs(7500)), "2h 05m");
    }
}
