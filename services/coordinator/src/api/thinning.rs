//! WatchTraining's `max_points`: the stored history of a long training,
//! thinned for a chart. Of the history that exists when the watch starts,
//! at most `max_points` progress points (SAE `progress` and a program's
//! `metrics`) are sent, evenly spaced with the first and the last always
//! among them, and rank stats alike; every other event (state changes,
//! checkpoints, validations, ...) and every live event is sent as always.

use crate::context::Context;
use crate::model::{EventPayload, StoredEvent};
use cohort_spec::progress::ProgressLine;
use tonic::Status;

/// The kinds of the frequent, chartable events.
const POINT_KINDS: &[&str] = &["progress", "metrics"];
const RANK_STATS_KINDS: &[&str] = &["rank_stats"];

/// Every `stride`-th of `total` events, and the last one.
#[derive(Debug, Clone, Copy)]
struct Stride {
    total: i64,
    stride: i64,
    seen: i64,
}

impl Stride {
    fn new(total: i64, max_points: i64) -> Self {
        let stride = if max_points <= 0 || total <= max_points {
            1
        } else {
            // ceil(total / max), and one slot kept for the last point.
            (total + max_points - 2) / (max_points - 1).max(1)
        };
        Stride {
            total,
            stride: stride.max(1),
            seen: 0,
        }
    }

    fn keep(&mut self) -> bool {
        let i = self.seen;
        self.seen += 1;
        i % self.stride == 0 || i == self.total - 1
    }
}

/// Decides, event by event, what a thinned history keeps.
#[derive(Debug)]
pub struct Thinning {
    /// The last sequence number of the history being thinned.
    history_end: i64,
    points: Stride,
    rank_stats: Stride,
}

impl Thinning {
    /// `None` when nothing is to be thinned (`max_points` 0, or a history
    /// with no more points than that).
    pub async fn plan(
        ctx: &Context,
        training_id: &str,
        after_seq: i64,
        history_end: i64,
        max_points: i32,
    ) -> Result<Option<Self>, Status> {
        if max_points < 0 {
            return Err(crate::error::ApiError::field("max_points", "must be >= 0").into());
        }
        if max_points == 0 || history_end <= after_seq {
            return Ok(None);
        }
        // The first and the last point are always sent.
        let max = i64::from(max_points).max(2);
        let db = &ctx.db;
        let count = |kinds| db.count_events_of_kinds(training_id, after_seq, history_end, kinds);
        let points = count(POINT_KINDS)
            .await
            .map_err(crate::error::ApiError::from)?;
        let rank_stats = count(RANK_STATS_KINDS)
            .await
            .map_err(crate::error::ApiError::from)?;
        if points <= max && rank_stats <= max {
            return Ok(None);
        }
        Ok(Some(Thinning {
            history_end,
            points: Stride::new(points, max),
            rank_stats: Stride::new(rank_stats, max),
        }))
    }

    /// Whether `event` is sent.
    pub fn keep(&mut self, event: &StoredEvent) -> bool {
        if event.seq > self.history_end {
            return true;
        }
        match &event.payload {
            EventPayload::Rank(ProgressLine::Progress(_) | ProgressLine::Metrics(_)) => {
                self.points.keep()
            }
            EventPayload::Rank(ProgressLine::RankStats { .. }) => self.rank_stats.keep(),
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(total: i64, max: i64) -> Vec<i64> {
        let mut s = Stride::new(total, max);
        (0..total).filter(|_| s.keep()).collect()
    }

    #[test]
    fn at_most_max_points_evenly_spaced_with_both_ends() {
        for (total, max) in [
            (100_000, 1_000),
            (1_001, 1_000),
            (10, 3),
            (7, 2),
            (5_000, 2),
        ] {
            let k = kept(total, max);
            assert!(k.len() as i64 <= max, "{total}/{max}: {} kept", k.len());
            assert_eq!(k[0], 0);
            assert_eq!(*k.last().unwrap(), total - 1, "{total}/{max}");
            assert!(k.len() as i64 >= max / 2, "{total}/{max}: only {}", k.len());
        }
    }

    #[test]
    fn a_short_history_is_sent_whole() {
        assert_eq!(kept(5, 1_000), vec![0, 1, 2, 3, 4]);
        assert_eq!(kept(5, 0), vec![0, 1, 2, 3, 4]);
    }
}
