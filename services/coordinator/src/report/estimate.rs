//! The scaling estimate: speed-up and efficiency at 2, 4 and 8 GPUs from a
//! training's own measured compute and communication times (the model of
//! docs/api.md, "Job reports").
//!
//! Data-parallel training keeps the per-rank batch, so a rank's compute per
//! step, `c`, does not change with the number of ranks. Its gradients are
//! all-reduced every step: a ring all-reduce moves 2(M-1)/M of the gradient
//! bytes per rank, so the communication measured at N ranks, `m(N)`, scales
//! to `m(M) = m(N) · ((M-1)/M) / ((N-1)/N)` (the same links and message
//! sizes). A step takes `t(M) = c + m(M)` (no overlap of the two: an
//! overlapped all-reduce does better); throughput is `M · batch / t(M)`, so
//! speed-up(M) = `M · c / t(M)` against one rank (which does not
//! communicate) and efficiency(M) = `c / t(M)`. A 1-rank run measured no
//! communication: it gives no estimate.

use super::summary::RankSummary;
use serde::Serialize;

/// The world sizes estimated.
pub const SIZES: [i32; 3] = [2, 4, 8];

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScalingEstimate {
    pub world_size: i32,
    pub step_time_ms: f64,
    pub speedup: f64,
    pub efficiency: f64,
}

/// Per step, the ranks' mean compute and communication (ms): each rank's
/// step time less its data wait, split by its compute/communication shares.
pub fn measured(ranks: &[RankSummary]) -> Option<(f64, f64)> {
    let parts: Vec<(f64, f64)> = ranks
        .iter()
        .filter_map(|r| {
            let step = r.mean_step_time_ms? - r.mean_data_wait_ms.unwrap_or(0.0);
            Some((step * r.compute_share?, step * r.comm_share?))
        })
        .filter(|(c, m)| c.is_finite() && m.is_finite() && *c > 0.0 && *m >= 0.0)
        .collect();
    if parts.is_empty() {
        return None;
    }
    let n = parts.len() as f64;
    let c = parts.iter().map(|p| p.0).sum::<f64>() / n;
    let m = parts.iter().map(|p| p.1).sum::<f64>() / n;
    Some((c, m))
}

/// The estimate at [`SIZES`] from a run of `world_size` ranks that measured
/// `compute_ms` and `comm_ms` per step; empty for a 1-rank run.
pub fn estimate(world_size: i32, compute_ms: f64, comm_ms: f64) -> Vec<ScalingEstimate> {
    if world_size < 2 || compute_ms <= 0.0 {
        return Vec::new();
    }
    let ring = |n: i32| f64::from(n - 1) / f64::from(n);
    SIZES
        .iter()
        .map(|&m| {
            let step = compute_ms + comm_ms * ring(m) / ring(world_size);
            ScalingEstimate {
                world_size: m,
                step_time_ms: step,
                speedup: f64::from(m) * compute_ms / step,
                efficiency: compute_ms / step,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn communication_scales_as_a_ring_all_reduce() {
        // Measured at 2 ranks: 30 ms compute, 10 ms all-reduce.
        let e = estimate(2, 30.0, 10.0);
        let sizes: Vec<i32> = e.iter().map(|e| e.world_size).collect();
        assert_eq!(sizes, [2, 4, 8]);
        assert!((e[0].step_time_ms - 40.0).abs() < 1e-9);
        assert!((e[0].efficiency - 0.75).abs() < 1e-9);
        // 4 ranks: m = 10 x (3/4) / (1/2) = 15 ms.
        assert!((e[1].step_time_ms - 45.0).abs() < 1e-9);
        assert!((e[1].speedup - 4.0 * 30.0 / 45.0).abs() < 1e-9);
        // 8 ranks: m = 10 x (7/8) / (1/2) = 17.5 ms; efficiency falls, speed-up grows.
        assert!((e[2].step_time_ms - 47.5).abs() < 1e-9);
        assert!(e[2].speedup > e[1].speedup && e[2].efficiency < e[1].efficiency);
    }

    #[test]
    fn no_estimate_without_communication_measured() {
        assert!(estimate(1, 30.0, 0.0).is_empty());
        assert!(estimate(4, 0.0, 5.0).is_empty());
    }
}
