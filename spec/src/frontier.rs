//! The L0 / explained-variance frontier an SAE is judged on: a trial is on
//! it when no other trial is at least as sparse (L0 no higher) and at least
//! as faithful (explained variance no lower), and better in one. Off the
//! frontier, a trial's distance to it is IGD+'s (Ishibuchi et al. 2015):
//! how far it must move, only in the directions that improve it, to reach
//! the nearest frontier point, with each axis scaled by the set's range so
//! that neither unit dominates. The hypervolume is the area the frontier
//! dominates up to a reference point: the measure of a whole frontier.

/// One trial's sparsity and fidelity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Mean active latents per sample: lower is better.
    pub l0: f64,
    /// Higher is better.
    pub explained_variance: f64,
}

impl Point {
    pub fn new(l0: f64, explained_variance: f64) -> Point {
        Point {
            l0,
            explained_variance,
        }
    }

    /// Both coordinates are numbers (a NaN or infinite point is never on a
    /// frontier: a NaN loss is a failure, not a result).
    pub fn is_finite(&self) -> bool {
        self.l0.is_finite() && self.explained_variance.is_finite()
    }

    /// Whether `self` dominates `other`: no worse on both axes, better on one.
    pub fn dominates(&self, other: &Point) -> bool {
        self.is_finite()
            && (!other.is_finite()
                || (self.l0 <= other.l0
                    && self.explained_variance >= other.explained_variance
                    && (self.l0 < other.l0 || self.explained_variance > other.explained_variance)))
    }
}

/// Which of `points` are on their frontier (finite, dominated by none).
pub fn on_frontier(points: &[Point]) -> Vec<bool> {
    points
        .iter()
        .map(|p| p.is_finite() && !points.iter().any(|q| q.dominates(p)))
        .collect()
}

/// Each point's distance to the frontier of `points`: 0 on it, infinite
/// when not finite. Axes are scaled by the finite points' ranges (an axis
/// with no range counts as 1).
pub fn distances(points: &[Point]) -> Vec<f64> {
    let on = on_frontier(points);
    let frontier: Vec<&Point> = points
        .iter()
        .zip(&on)
        .filter(|(_, o)| **o)
        .map(|(p, _)| p)
        .collect();
    let scale = Scale::of(points);
    let (l0_range, ev_range) = (scale.l0, scale.explained_variance);
    points
        .iter()
        .zip(&on)
        .map(|(p, on)| {
            if *on {
                return 0.0;
            }
            if !p.is_finite() {
                return f64::INFINITY;
            }
            frontier
                .iter()
                .map(|f| {
                    let dx = ((p.l0 - f.l0) / l0_range).max(0.0);
                    let dy = ((f.explained_variance - p.explained_variance) / ev_range).max(0.0);
                    dx.hypot(dy)
                })
                .fold(f64::INFINITY, f64::min)
        })
        .collect()
}

/// The order in which to keep the points on the frontier of `points` when
/// not all of them can go on: by spread, as an epsilon-net is built
/// (MO-ASHA, Schmucker et al. 2021). Its two ends, the sparsest and the
/// most faithful point, come first (both 0); then, one at a time, the
/// point farthest from every point already taken (axes scaled by the
/// finite points' ranges, as in [`distances`]), ties to the sparser. Each
/// point gets its place in that order; a point off the frontier gets
/// `None`. Equal points share a place.
pub fn spread_order(points: &[Point]) -> Vec<Option<usize>> {
    let on = on_frontier(points);
    let scale = Scale::of(points);
    let mut front: Vec<usize> = (0..points.len()).filter(|&i| on[i]).collect();
    front.sort_by(|&a, &b| points[a].l0.total_cmp(&points[b].l0));
    let mut place: Vec<Option<usize>> = vec![None; points.len()];
    let (Some(&sparsest), Some(&faithful)) = (front.first(), front.last()) else {
        return place;
    };
    // Each untaken point's gap to its nearest taken one, kept up to date
    // as points are taken: O(front²) in all.
    let mut nearest: Vec<f64> = vec![f64::INFINITY; points.len()];
    let take = |i: usize, at: usize, place: &mut [Option<usize>], nearest: &mut [f64]| {
        let taken = points[i];
        for &j in &front {
            let gap = scale.gap(&points[j], &taken);
            if gap == 0.0 && place[j].is_none() {
                place[j] = Some(at); // i itself, or a point equal to it
            }
            nearest[j] = nearest[j].min(gap);
        }
    };
    take(sparsest, 0, &mut place, &mut nearest);
    take(faithful, 0, &mut place, &mut nearest);
    for at in 1.. {
        // The farthest; of equals, the sparser (the front is sorted by L0).
        let next =
            front
                .iter()
                .filter(|&&i| place[i].is_none())
                .fold(None, |best: Option<usize>, &i| match best {
                    Some(b) if nearest[b] >= nearest[i] => best,
                    _ => Some(i),
                });
        let Some(i) = next else { break };
        take(i, at, &mut place, &mut nearest);
    }
    place
}

/// The finite points' range on each axis (an axis with no range counts
/// as 1), to measure gaps in units of the set's own spread.
struct Scale {
    l0: f64,
    explained_variance: f64,
}

impl Scale {
    fn of(points: &[Point]) -> Scale {
        let finite: Vec<&Point> = points.iter().filter(|p| p.is_finite()).collect();
        let range = |f: fn(&Point) -> f64| {
            let lo = finite.iter().map(|p| f(p)).fold(f64::INFINITY, f64::min);
            let hi = finite
                .iter()
                .map(|p| f(p))
                .fold(f64::NEG_INFINITY, f64::max);
            if hi > lo {
                hi - lo
            } else {
                1.0
            }
        };
        Scale {
            l0: range(|p| p.l0),
            explained_variance: range(|p| p.explained_variance),
        }
    }

    /// The scaled distance between two points.
    fn gap(&self, a: &Point, b: &Point) -> f64 {
        ((a.l0 - b.l0) / self.l0)
            .hypot((a.explained_variance - b.explained_variance) / self.explained_variance)
    }
}

/// The area the finite points dominate within the box from `reference`
/// (an L0 no sparser trial reaches, an explained variance no trial falls
/// below): L0 from the point to the reference's, times explained variance
/// from the reference's to the point's. Points outside the box add nothing.
pub fn hypervolume(points: &[Point], reference: Point) -> f64 {
    let mut inside: Vec<Point> = points
        .iter()
        .filter(|p| {
            p.is_finite()
                && p.l0 < reference.l0
                && p.explained_variance > reference.explained_variance
        })
        .copied()
        .collect();
    // Sparsest first; a sweep over L0 adds each point's strip of fidelity
    // above the best seen so far.
    inside.sort_by(|a, b| {
        a.l0.total_cmp(&b.l0)
            .then(b.explained_variance.total_cmp(&a.explained_variance))
    });
    let mut area = 0.0;
    let mut best = reference.explained_variance;
    for p in inside {
        if p.explained_variance > best {
            area += (reference.l0 - p.l0) * (p.explained_variance - best);
            best = p.explained_variance;
        }
    }
    area
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(l0: f64, ev: f64) -> Point {
        Point::new(l0, ev)
    }

    #[test]
    fn the_frontier_is_the_points_nothing_dominates() {
        let points = [
            p(10.0, 0.9),
            p(5.0, 0.8),
            p(12.0, 0.85),
            p(5.0, 0.7),
            p(f64::NAN, 1.0),
        ];
        assert_eq!(on_frontier(&points), vec![true, true, false, false, false]);
        // Two equal points are both on it.
        assert_eq!(on_frontier(&[p(1.0, 0.5), p(1.0, 0.5)]), vec![true, true]);
    }

    #[test]
    fn distances_are_zero_on_the_frontier_and_scaled_off_it() {
        // L0 spans 0..20, EV 0.5..0.9.
        let points = [p(0.0, 0.5), p(20.0, 0.9), p(20.0, 0.5), p(f64::NAN, 0.0)];
        let d = distances(&points);
        assert_eq!(d[0], 0.0);
        assert_eq!(d[1], 0.0);
        // (20, 0.5) is a full L0 range right of (0, 0.5) and a full EV range
        // below (20, 0.9): one unit from either.
        assert!((d[2] - 1.0).abs() < 1e-12, "{}", d[2]);
        assert!(d[3].is_infinite());
    }

    #[test]
    fn the_frontier_is_kept_ends_first_then_by_spread() {
        // Five points along the frontier (exact quarters of each range)
        // and one dominated; listed out of order.
        let points = [
            p(8.0, 0.75),
            p(16.0, 0.5),
            p(0.0, 0.5),
            p(12.0, 0.875),
            p(16.0, 1.0),
            p(4.0, 0.625),
        ];
        // The ends, then the middle, then the quarters (of two equally
        // far, the sparser first); the dominated point has no place.
        assert_eq!(
            spread_order(&points),
            vec![Some(1), None, Some(0), Some(3), Some(0), Some(2)]
        );
        // Equal points share their place; a lone point is both ends.
        assert_eq!(
            spread_order(&[p(1.0, 0.5), p(1.0, 0.5)]),
            vec![Some(0), Some(0)]
        );
        assert_eq!(spread_order(&[p(f64::NAN, 0.5)]), vec![None]);
    }

    #[test]
    fn hypervolume_adds_the_strips_each_point_dominates() {
        let reference = p(100.0, 0.0);
        assert_eq!(hypervolume(&[p(50.0, 0.5)], reference), 25.0);
        // (20, 0.4) adds 80 x 0.4; (60, 0.8) adds 40 x (0.8 - 0.4).
        let hv = hypervolume(&[p(60.0, 0.8), p(20.0, 0.4), p(70.0, 0.3)], reference);
        assert!((hv - (32.0 + 16.0)).abs() < 1e-9, "{hv}");
        // Outside the box or not finite: nothing.
        assert_eq!(
            hypervolume(&[p(120.0, 0.9), p(f64::NAN, 0.9)], reference),
            0.0
        );
    }
}
