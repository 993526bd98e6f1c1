//! Synthetic traces shaped like the public GPU-cluster traces (Microsoft's
//! Philly, 2017): mostly small jobs, multi-GPU jobs that run for half a
//! day at the median with a heavy tail to weeks, arrivals in bursts, teams
//! of unequal demand, and more demand than the fleet can serve. The
//! distributions (docs/scheduling.md#generated-traces):
//!
//! - GPUs: 1 (45 %), 2 (10 %), 4 (15 %), 8 (18 %), 16 (7 %), 32 (3.5 %),
//!   64 (1.5 %).
//! - Duration: log-normal, sigma 1.2, median 2 h for 1 GPU, 6 h for 2, 14 h
//!   for 4 and 8, 20 h for 16 and more; between 5 minutes and 14 days.
//! - Class: `--urgent-fraction` urgent, 10 % high, 20 % low, the rest normal.
//! - Team: `--teams` teams, team i's share of jobs in proportion to 1/(i+1).
//! - Arrivals: a Poisson process whose offered work is `--load` times what
//!   the fleet can run on weekdays and 0.4 times on weekends (so demand is
//!   above supply all week and the queue drains on weekends, as on real
//!   fleets); 10 % of the jobs come in bursts of 10 to 40 within ten
//!   minutes.
//! - Checkpoints every 15, 30 or 60 minutes; 70 % save on a notice.
//! - `--expected-fraction` of the jobs say their duration, each off by a
//!   log-normal factor of sigma `--expected-noise` (0.25: what users guess).

use crate::trace::TraceJob;
use cohort_spec::rng::Rng;

/// What to generate.
#[derive(Debug, Clone)]
pub struct Spec {
    pub jobs: usize,
    pub seed: u64,
    pub teams: usize,
    pub urgent_fraction: f64,
    /// GPUs of the fleet the load is for.
    pub fleet_gpus: u32,
    /// Offered work over what the fleet can run on weekdays (> 1: demand
    /// above supply); weekends offer [`WEEKEND_LOAD`].
    pub load: f64,
    pub expected_fraction: f64,
    /// How far users' guesses are off: the sigma of a log-normal factor.
    pub expected_noise: f64,
}

const SIZES: [(u32, f64); 7] = [
    (1, 0.45),
    (2, 0.10),
    (4, 0.15),
    (8, 0.18),
    (16, 0.07),
    (32, 0.035),
    (64, 0.015),
];

/// The median duration (hours) of a job of `gpus` GPUs.
fn median_hours(gpus: u32) -> f64 {
    match gpus {
        1 => 2.0,
        2 => 6.0,
        4 | 8 => 14.0,
        _ => 20.0,
    }
}

/// The offered load on Saturdays and Sundays.
pub const WEEKEND_LOAD: f64 = 0.4;

const MIN_DURATION_S: f64 = 300.0;
const MAX_DURATION_S: f64 = 14.0 * 86_400.0;

/// A trace of `spec.jobs` jobs, sorted by submit time.
pub fn generate(spec: &Spec) -> Vec<TraceJob> {
    let mut rng = Rng::new(spec.seed);
    let team_weights: Vec<f64> = (0..spec.teams.max(1))
        .map(|i| 1.0 / (i + 1) as f64)
        .collect();
    let size_weights: Vec<f64> = SIZES.iter().map(|(_, w)| *w).collect();
    let mut jobs: Vec<TraceJob> = (0..spec.jobs)
        .map(|i| {
            let gpus = SIZES[rng.pick(&size_weights)].0.min(spec.fleet_gpus.max(1));
            let duration = rng
                .lognormal(median_hours(gpus) * 3600.0, 1.2)
                .clamp(MIN_DURATION_S, MAX_DURATION_S);
            let class = {
                let x = rng.unit();
                let u = spec.urgent_fraction;
                if x < u {
                    "urgent"
                } else if x < u + 0.10 {
                    "high"
                } else if x < u + 0.30 {
                    "low"
                } else {
                    "normal"
                }
            };
            let expected = (rng.unit() < spec.expected_fraction)
                .then(|| (duration * rng.lognormal(1.0, spec.expected_noise)).round());
            TraceJob {
                id: format!("j{i:05}"),
                submit_s: 0.0,
                team: format!("team-{}", rng.pick(&team_weights)),
                gpus,
                duration_s: duration.round(),
                class: class.to_string(),
                checkpoint_every_s: [900.0, 1800.0, 3600.0][rng.pick(&[1.0, 1.0, 1.0])],
                expected_duration_s: expected,
                saves_on_notice: rng.unit() < 0.7,
                min_gpus: None,
            }
        })
        .collect();
    arrive(&mut jobs, spec, &mut rng);
    jobs.sort_by(|a, b| a.submit_s.total_cmp(&b.submit_s).then(a.id.cmp(&b.id)));
    jobs
}

/// The offered load at `t` seconds (day 0 a Monday).
fn load_at(t: f64, weekday: f64) -> f64 {
    let day = (t / 86_400.0).floor() as i64 % 7;
    if day >= 5 {
        WEEKEND_LOAD
    } else {
        weekday
    }
}

/// Submit times: Poisson with an intensity that offers `load(t)` times
/// the fleet's capacity (weekdays and weekends), a tenth in bursts.
fn arrive(jobs: &mut [TraceJob], spec: &Spec, rng: &mut Rng) {
    let work: f64 = jobs.iter().map(|j| j.duration_s * f64::from(j.gpus)).sum();
    let per_job = work / jobs.len().max(1) as f64;
    let capacity = f64::from(spec.fleet_gpus.max(1));
    let mut t = 0.0;
    let mut i = 0;
    while i < jobs.len() {
        // Jobs per second now: offered GPU-seconds per second over the
        // mean job's GPU-seconds.
        let rate = load_at(t, spec.load.max(0.01)) * capacity / per_job;
        t += rng.exponential(1.0 / rate);
        let burst = rng.unit() < 0.1 / 25.0;
        let size = if burst {
            10 + (rng.unit() * 30.0) as usize
        } else {
            1
        };
        for job in jobs.iter_mut().skip(i).take(size) {
            job.submit_s = (t + if burst { rng.uniform(0.0, 600.0) } else { 0.0 }).round();
        }
        i += size;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Spec {
        Spec {
            jobs: 2000,
            seed: 3,
            teams: 4,
            urgent_fraction: 0.1,
            fleet_gpus: 256,
            load: 1.2,
            expected_fraction: 1.0,
            expected_noise: 0.25,
        }
    }

    #[test]
    fn seeded_reproducible_and_shaped_as_documented() {
        let a = generate(&spec());
        assert_eq!(a, generate(&spec()), "the same seed, the same trace");
        assert_ne!(a, generate(&Spec { seed: 4, ..spec() }));
        assert!(a.windows(2).all(|w| w[0].submit_s <= w[1].submit_s));
        let urgent = a.iter().filter(|j| j.class == "urgent").count() as f64 / a.len() as f64;
        assert!((urgent - 0.1).abs() < 0.03, "{urgent}");
        let one = a.iter().filter(|j| j.gpus == 1).count() as f64 / a.len() as f64;
        assert!((one - 0.45).abs() < 0.05, "{one}");
        let mut multi: Vec<f64> = a
            .iter()
            .filter(|j| (4..=8).contains(&j.gpus))
            .map(|j| j.duration_s)
            .collect();
        multi.sort_by(f64::total_cmp);
        let median = multi[multi.len() / 2] / 3600.0;
        assert!((10.0..18.0).contains(&median), "median {median} h");
        assert!(a
            .iter()
            .all(|j| j.duration_s >= MIN_DURATION_S && j.duration_s <= MAX_DURATION_S));
        let teams: std::collections::HashSet<&str> = a.iter().map(|j| j.team.as_str()).collect();
        assert_eq!(teams.len(), 4);
        // The offered load over the span is between the weekend's and
        // the weekdays'.
        let work: f64 = a.iter().map(|j| j.duration_s * f64::from(j.gpus)).sum();
        let span = a.last().unwrap().submit_s;
        let load = work / (span * 256.0);
        assert!((0.8..1.2).contains(&load), "{load}");
    }
}
