//! Early stopping (ASHA and the median rule) over rungs: a trial's
//! objective is recorded when the searcher first sees it at or past a rung,
//! and judged against what the sweep's other trials recorded there.
//!
//! ASHA (asynchronous successive halving, Li et al. 2020) as Ray Tune's and
//! Determined's stopping variant runs it: rungs at a trial's total steps
//! times eta^-2 and eta^-1; at a rung a trial goes on while it is among the
//! best ceil(n / eta) of the n trials recorded there (itself included), so
//! the first trials at a rung always go on and nobody waits for stragglers.
//! The median rule (Golovin et al. 2017, Google Vizier): rungs at a quarter,
//! a half and three quarters; a trial is stopped when worse than the median
//! of at least 3 other trials at the rung.

use crate::model::{Direction, Searcher};

/// The fewest other trials at a rung the median rule judges against.
pub const MEDIAN_MIN_OTHERS: usize = 3;

/// The steps of a trial's rungs (1-based rung = index + 1), each in
/// `1..total_steps`, increasing.
pub fn rungs(searcher: Searcher, eta: f64, total_steps: i64) -> Vec<i64> {
    let fractions: Vec<f64> = match searcher {
        Searcher::Asha => vec![1.0 / (eta * eta), 1.0 / eta],
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

/// Why a trial with `value` at a rung stops, given the values `others`
/// recorded there before it; `None`: it goes on. A NaN is worse than
/// any number.
pub fn verdict(
    searcher: Searcher,
    eta: f64,
    direction: Direction,
    value: f64,
    others: &[f64],
) -> Option<String> {
    let better = |a: f64, b: f64| match (a.is_nan(), b.is_nan()) {
        (true, _) => false,
        (false, true) => true,
        (false, false) => direction.better(a, b),
    };
    match searcher {
        Searcher::Asha => {
            let n = others.len() + 1;
            let keep = (n as f64 / eta).ceil() as usize;
            let ahead = others.iter().filter(|o| better(**o, value)).count();
            (ahead >= keep).then(|| {
                format!(
                    "not among the best {keep} of the {n} trials at this rung (ASHA, eta {eta})"
                )
            })
        }
        Searcher::Median => {
            if others.len() < MEDIAN_MIN_OTHERS {
                return None;
            }
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
        Searcher::Grid | Searcher::Random => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Direction::{Maximize, Minimize};

    #[test]
    fn rungs_fall_inside_the_run() {
        assert_eq!(rungs(Searcher::Asha, 3.0, 900), vec![100, 300]);
        assert_eq!(rungs(Searcher::Median, 3.0, 100), vec![25, 50, 75]);
        assert_eq!(rungs(Searcher::Asha, 3.0, 2), vec![1]);
        assert!(rungs(Searcher::Random, 3.0, 900).is_empty());
    }

    #[test]
    fn asha_keeps_the_best_third_and_the_first_arrivals() {
        let asha = |v: f64, others: &[f64]| verdict(Searcher::Asha, 3.0, Minimize, v, others);
        // Alone, or second or third at the rung: ceil(n/3) = 1 is kept.
        assert_eq!(asha(5.0, &[]), None);
        assert!(asha(5.0, &[1.0]).is_some());
        assert_eq!(asha(0.5, &[1.0]), None);
        // Of 4, the best 2 go on.
        assert_eq!(asha(2.0, &[1.0, 3.0, 4.0]), None);
        assert!(asha(3.5, &[1.0, 2.0, 4.0]).is_some());
        // NaN is worst, whatever the direction.
        assert!(asha(f64::NAN, &[1.0]).is_some());
        assert!(verdict(Searcher::Asha, 3.0, Maximize, 0.2, &[0.9]).is_some());
        assert_eq!(verdict(Searcher::Asha, 3.0, Maximize, 0.95, &[0.9]), None);
    }

    #[test]
    fn the_median_rule_needs_three_others_and_stops_the_worse_half() {
        let median = |v: f64, others: &[f64]| verdict(Searcher::Median, 3.0, Minimize, v, others);
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
