//! Rungs and who goes on at them (docs/sweeps.md): a trial's objective is
//! recorded when the searcher first sees it at or past a rung, and ranked
//! against what the sweep's other trials recorded there.
//!
//! ASHA (asynchronous successive halving, Li et al. 2020) as Determined
//! runs it: rungs at a trial's total steps times eta^-k, ..., eta^-1, as
//! many (k) as the sweep's trials can fill, as Hyperband sizes its widest
//! bracket: the most with eta^k <= max_trials, at least 2 and at most
//! [`ASHA_MAX_RUNGS`] (Determined's default `max_rungs`); a trial
//! at a rung goes on while it is among the best floor(n / eta) of the n
//! trials recorded there, else it pauses with a checkpoint; a paused trial
//! is promoted, and resumes from that checkpoint, once enough others have
//! come that it ranks in the best share; nobody waits for stragglers. When
//! no more trials can reach a rung the share is ceil(n / eta), and the
//! paused trials that never make it end stopped.
//! The median rule (Golovin et al. 2017, Google Vizier): rungs at a quarter,
//! a half and three quarters; a trial is stopped when worse than the median
//! of at least 3 other trials at the rung.
//! The frontier ranks by distance to the rung's L0 / explained-variance
//! frontier, every trial on it first, and those on it by spread (its ends
//! first, then the points farthest from those before: an epsilon-net, as
//! MO-ASHA, Schmucker et al. 2021): ASHA keeps its share spread along the
//! frontier, at every sparsity, rather than every trial on it.

use crate::model::{Direction, Objective, RungRecord, Searcher};
use cohort_spec::frontier::{self, Point};

/// The fewest other trials at a rung the median rule judges against.
pub const MEDIAN_MIN_OTHERS: usize = 3;

/// The most rungs ASHA sets.
pub const ASHA_MAX_RUNGS: u32 = 5;

/// How many rungs ASHA sets for a sweep of `max_trials`: the most k with
/// eta^k <= max_trials (so about one trial reaches the end), between 2
/// and [`ASHA_MAX_RUNGS`].
pub fn asha_rung_count(eta: f64, max_trials: i32) -> u32 {
    let mut k = 0;
    let mut reach = eta;
    while k < ASHA_MAX_RUNGS && reach <= f64::from(max_trials) * (1.0 + 1e-9) {
        k += 1;
        reach *= eta;
    }
    k.max(2)
}

/// The steps of a trial's rungs (1-based rung = index + 1), each in
/// `1..total_steps`, increasing.
pub fn rungs(searcher: Searcher, eta: f64, max_trials: i32, total_steps: i64) -> Vec<i64> {
    let fractions: Vec<f64> = match searcher {
        Searcher::Asha => (1..=asha_rung_count(eta, max_trials))
            .rev()
            .map(|k| eta.powi(-(k as i32)))
            .collect(),
        Searcher::Median => vec![0.25, 0.5, 0.75],
        Searcher::Grid | Searcher::Random => Vec::new(),
    };
    let mut steps: Vec<i64> = fractions
        .iter()
        .map(|f| ((total_steps as f64) * f).ceil() as i64)
        .filter(|s| *s >= 1 && *s < total_steps)
        .collect();
    steps.dedup();
    steps
}

/// How the trials at a rung are ranked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ranking {
    /// By one metric.
    Metric(Direction),
    /// By distance to the rung's L0 / explained-variance frontier: every
    /// trial on it ranks first.
    Frontier,
}

impl Ranking {
    pub fn of(objective: &Objective) -> Ranking {
        if objective.is_frontier() {
            Ranking::Frontier
        } else {
            Ranking::Metric(objective.direction)
        }
    }
}

/// Each record's score at its rung, lower is better: the metric (negated
/// when maximised), or for the frontier the distance to the records'
/// frontier, and on it (ahead of every trial off it) the frontier's spread
/// order: its two ends first, then each point farthest from those before
/// it ([`frontier::spread_order`]). A NaN scores worst.
pub fn scores(ranking: Ranking, records: &[&RungRecord]) -> Vec<f64> {
    let finite_or_worst = |v: f64| if v.is_nan() { f64::INFINITY } else { v };
    match ranking {
        Ranking::Metric(Direction::Minimize) => {
            records.iter().map(|r| finite_or_worst(r.value)).collect()
        }
        Ranking::Metric(Direction::Maximize) => {
            records.iter().map(|r| finite_or_worst(-r.value)).collect()
        }
        Ranking::Frontier => {
            let points: Vec<Point> = records
                .iter()
                .map(|r| Point::new(r.l0.unwrap_or(f64::NAN), r.value))
                .collect();
            // On the frontier, by its spread order, in -1..0 (ahead of
            // every distance); off it, by the distance.
            let n = points.len() as f64;
            frontier::distances(&points)
                .into_iter()
                .zip(frontier::spread_order(&points))
                .map(|(distance, place)| place.map_or(distance, |at| at as f64 / n - 1.0))
                .collect()
        }
    }
}

/// How many of `scores` are strictly better than `scores[i]`.
pub fn ahead(scores: &[f64], i: usize) -> usize {
    scores.iter().filter(|s| **s < scores[i]).count()
}

/// ASHA: how many of the `n` trials at a rung go on to the next. While
/// more trials may still reach the rung, the best floor(n / eta) (the
/// first arrivals pause until enough others have come); once none can,
/// ceil(n / eta), so the best always finishes.
pub fn asha_keeps(n: usize, eta: f64, closed: bool) -> usize {
    let share = n as f64 / eta;
    if closed {
        share.ceil() as usize
    } else {
        share.floor() as usize
    }
}

/// The median rule: why a trial with `value` at a rung stops, given the
/// values `others` recorded there before it; `None`: it goes on.
pub fn median_verdict(direction: Direction, value: f64, others: &[f64]) -> Option<String> {
    if others.len() < MEDIAN_MIN_OTHERS {
        return None;
    }
    let better = |a: f64, b: f64| match (a.is_nan(), b.is_nan()) {
        (true, _) => false,
        (false, true) => true,
        (false, false) => direction.better(a, b),
    };
    let mut sorted: Vec<f64> = others.to_vec();
    sorted.sort_by(|a, b| match (better(*a, *b), better(*b, *a)) {
        (true, _) => std::cmp::Ordering::Less,
        (_, true) => std::cmp::Ordering::Greater,
        _ => std::cmp::Ordering::Equal,
    });
    let mid = sorted.len() / 2;
    let median = if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    };
    better(median, value).then(|| {
        format!(
            "worse than the median {median:.6} of the {} other trials at this rung (median stopping)",
            others.len()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use Direction::{Maximize, Minimize};

    #[test]
    fn rungs_fall_inside_the_run() {
        assert_eq!(rungs(Searcher::Asha, 3.0, 6, 900), vec![100, 300]);
        assert_eq!(rungs(Searcher::Asha, 3.0, 32, 2700), vec![100, 300, 900]);
        assert_eq!(rungs(Searcher::Median, 3.0, 6, 100), vec![25, 50, 75]);
        assert_eq!(rungs(Searcher::Asha, 3.0, 6, 2), vec![1]);
        assert!(rungs(Searcher::Random, 3.0, 6, 900).is_empty());
    }

    #[test]
    fn asha_sets_as_many_rungs_as_its_trials_fill() {
        assert_eq!(asha_rung_count(3.0, 6), 2);
        assert_eq!(asha_rung_count(3.0, 26), 2);
        assert_eq!(asha_rung_count(3.0, 27), 3);
        assert_eq!(asha_rung_count(3.0, 32), 3);
        assert_eq!(asha_rung_count(3.0, 81), 4);
        assert_eq!(asha_rung_count(4.0, 32), 2);
        assert_eq!(asha_rung_count(2.0, 256), ASHA_MAX_RUNGS);
    }

    fn record(value: f64, l0: Option<f64>) -> RungRecord {
        RungRecord {
            trial_index: 0,
            rung: 1,
            step: 1,
            value,
            l0,
        }
    }

    #[test]
    fn asha_keeps_floor_while_open_and_ceil_once_closed() {
        assert_eq!(asha_keeps(1, 3.0, false), 0);
        assert_eq!(asha_keeps(2, 3.0, false), 0);
        assert_eq!(asha_keeps(3, 3.0, false), 1);
        assert_eq!(asha_keeps(7, 3.0, false), 2);
        assert_eq!(asha_keeps(1, 3.0, true), 1);
        assert_eq!(asha_keeps(2, 3.0, true), 1);
        assert_eq!(asha_keeps(4, 3.0, true), 2);
    }

    #[test]
    fn metric_scores_rank_by_direction_and_nan_last() {
        let records = [record(2.0, None), record(1.0, None), record(f64::NAN, None)];
        let refs: Vec<&RungRecord> = records.iter().collect();
        let min = scores(Ranking::Metric(Minimize), &refs);
        assert_eq!((ahead(&min, 0), ahead(&min, 1), ahead(&min, 2)), (1, 0, 2));
        let max = scores(Ranking::Metric(Maximize), &refs);
        assert_eq!((ahead(&max, 0), ahead(&max, 1), ahead(&max, 2)), (0, 1, 2));
    }

    #[test]
    fn the_frontier_keeps_a_sparse_trial_a_loss_ranking_puts_last() {
        // Dense and faithful, sparse and less faithful, and one dominated
        // by the dense trial: value is the explained variance.
        let records = [
            record(0.95, Some(40.0)),
            record(0.80, Some(8.0)),
            record(0.90, Some(45.0)),
        ];
        let refs: Vec<&RungRecord> = records.iter().collect();
        let s = scores(Ranking::Frontier, &refs);
        assert_eq!((ahead(&s, 0), ahead(&s, 1)), (0, 0), "{s:?}");
        assert_eq!(ahead(&s, 2), 2, "{s:?}");
        // Of five trials on the frontier the ends rank first, then the
        // middle one: a share of 3 keeps them, not the two beside the middle.
        let records = [
            record(0.5, Some(0.0)),
            record(0.625, Some(4.0)),
            record(0.75, Some(8.0)),
            record(0.875, Some(12.0)),
            record(1.0, Some(16.0)),
            record(0.5, Some(16.0)),
        ];
        let refs: Vec<&RungRecord> = records.iter().collect();
        let s = scores(Ranking::Frontier, &refs);
        let ranks: Vec<usize> = (0..records.len()).map(|i| ahead(&s, i)).collect();
        assert_eq!(ranks, vec![0, 3, 2, 4, 0, 5], "{s:?}");
        let keep = asha_keeps(records.len(), 2.0, false);
        let kept: Vec<usize> = (0..records.len()).filter(|&i| ranks[i] < keep).collect();
        assert_eq!(kept, vec![0, 2, 4]);
        // A trial with no L0 (NaN) is never on the frontier.
        let refs = [&records[0], &record(0.99, None)];
        let s = scores(Ranking::Frontier, &refs);
        assert_eq!(ahead(&s, 1), 1, "{s:?}");
    }

    #[test]
    fn the_median_rule_needs_three_others_and_stops_the_worse_half() {
        let median = |v: f64, others: &[f64]| median_verdict(Minimize, v, others);
        assert_eq!(median(9.0, &[1.0, 2.0]), None);
        assert!(median(2.5, &[1.0, 2.0, 3.0]).is_some());
        assert_eq!(median(1.5, &[1.0, 2.0, 3.0]), None);
        assert_eq!(
            median(2.0, &[1.0, 2.0, 3.0]),
            None,
            "the median itself goes on"
        );
        let why = median(9.0, &[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert!(why.contains("median 2.5"), "{why}");
    }
}
