//! What a run measured, per policy: utilization, queue waits and completion
//! times per class and per team, preemptions and the work they lost, how
//! long a team waited for its guaranteed GPUs, and how far the start-time
//! estimates were from the simulated starts. Printed side by side, or as
//! JSON (`-o json`: one array, an object per policy).

use crate::engine::Run;
use serde::Serialize;
use std::collections::BTreeMap;

/// p50, p95, p99 (nearest rank) of some seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Percentiles {
    pub count: usize,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
}

impl Percentiles {
    pub fn of(mut values: Vec<f64>) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        values.sort_by(f64::total_cmp);
        let at = |q: f64| {
            let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
            values[rank - 1]
        };
        Self {
            count: values.len(),
            p50: at(0.50),
            p95: at(0.95),
            p99: at(0.99),
        }
    }
}

/// How far some estimates were off: |estimated start - actual start| over
/// (actual start - when it was estimated).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ErrorShare {
    pub judged: usize,
    pub median: f64,
    pub p90: f64,
}

impl ErrorShare {
    fn of(mut errors: Vec<f64>) -> Self {
        errors.sort_by(f64::total_cmp);
        let p = |q: f64| {
            if errors.is_empty() {
                return 0.0;
            }
            errors[((q * errors.len() as f64).ceil() as usize).clamp(1, errors.len()) - 1]
        };
        Self {
            judged: errors.len(),
            median: p(0.5),
            p90: p(0.9),
        }
    }
}

/// Every job's first start estimate (made within `--estimate-every-s` of
/// its submission, as the coordinator's estimate loop does) against its
/// simulated start.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EstimateError {
    /// Jobs that got an estimate (still waiting after their first pass).
    pub estimated: usize,
    /// Jobs forecast without one (NO_DURATION, NO_ESTIMATE).
    pub without: usize,
    /// Over every estimated job that started.
    pub all: ErrorShare,
    /// Over those that then waited at least `min_wait_s` (the hard part:
    /// whoever newcomers may overtake).
    pub waited: ErrorShare,
    /// The estimates those jobs carried later while they waited (one every
    /// ten minutes of a wait, each judged against the wait it had left):
    /// what a user looking at a random moment sees.
    pub later: ErrorShare,
    pub min_wait_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub policy: String,
    pub jobs: usize,
    pub finished: usize,
    pub never_started: usize,
    /// From the first submission to the last end.
    pub makespan_s: f64,
    /// GPU-time held by jobs over GPU-time of the fleet, first submission
    /// to last end (0-1).
    pub utilization: f64,
    /// The same from the first submission to the last (while demand lasts).
    pub utilization_while_submitting: f64,
    /// Queue wait (submission to first start) by class.
    pub wait_s: BTreeMap<String, Percentiles>,
    pub wait_s_by_team: BTreeMap<String, Percentiles>,
    /// Submission to end, by class and by team.
    pub completion_s: BTreeMap<String, Percentiles>,
    pub completion_s_by_team: BTreeMap<String, Percentiles>,
    pub preemptions: u64,
    pub reclaims: u64,
    /// Grows and shrinks of elastic jobs, and the GPU-hours their stops
    /// and restarts cost.
    pub resizes: u64,
    pub resize_gpu_hours: f64,
    pub lost_gpu_hours: f64,
    /// GPU-hours of the finished jobs' work.
    pub delivered_gpu_hours: f64,
    pub lost_gpu_hours_fraction: f64,
    /// Submission to start of the jobs submitted within their team's
    /// guarantee: how long a team waits for its guaranteed GPUs.
    pub guarantee_wait_s: Percentiles,
    pub estimates: EstimateError,
    /// Scheduling passes, and the forecasts' passes.
    pub passes: u64,
    pub forecasts: u64,
    pub forecast_passes: u64,
    /// Wall time of the run on this machine.
    pub took_s: f64,
}

/// Only jobs that then waited this long judge the estimates.
const MIN_WAIT_S: f64 = 300.0;

fn by<K: Ord + Clone>(rows: impl Iterator<Item = (K, f64)>) -> BTreeMap<K, Percentiles> {
    let mut groups: BTreeMap<K, Vec<f64>> = BTreeMap::new();
    for (k, v) in rows {
        groups.entry(k).or_default().push(v);
    }
    groups
        .into_iter()
        .map(|(k, v)| (k, Percentiles::of(v)))
        .collect()
}

impl Outcome {
    pub fn of(policy: &str, run: &Run) -> Self {
        let jobs = &run.jobs;
        let first = jobs
            .iter()
            .map(|j| j.trace.submit_s)
            .fold(f64::INFINITY, f64::min);
        let last_end = jobs.iter().filter_map(|j| j.end).fold(first, f64::max);
        let makespan = (last_end - first).max(0.0);
        let held: f64 = jobs.iter().map(|j| j.held_gpu_s).sum();
        let capacity = f64::from(run.gpus) * makespan;
        let waits = jobs
            .iter()
            .filter_map(|j| Some((j, j.first_start? - j.trace.submit_s)));
        let done = jobs
            .iter()
            .filter_map(|j| Some((j, j.end? - j.trace.submit_s)));
        let delivered: f64 = jobs
            .iter()
            .filter(|j| j.end.is_some())
            .map(|j| j.trace.duration_s * f64::from(j.trace.gpus))
            .sum::<f64>()
            / 3600.0;
        let lost: f64 = jobs.iter().map(|j| j.lost_gpu_s).sum::<f64>() / 3600.0;
        Self {
            policy: policy.to_string(),
            jobs: jobs.len(),
            finished: jobs.iter().filter(|j| j.end.is_some()).count(),
            never_started: jobs.iter().filter(|j| j.first_start.is_none()).count(),
            makespan_s: makespan,
            utilization: if capacity > 0.0 { held / capacity } else { 0.0 },
            utilization_while_submitting: busy_while_submitting(run),
            wait_s: by(waits.clone().map(|(j, w)| (j.trace.class.clone(), w))),
            wait_s_by_team: by(waits.map(|(j, w)| (j.trace.team.clone(), w))),
            completion_s: by(done.clone().map(|(j, c)| (j.trace.class.clone(), c))),
            completion_s_by_team: by(done.map(|(j, c)| (j.trace.team.clone(), c))),
            preemptions: jobs.iter().map(|j| u64::from(j.preemptions)).sum(),
            reclaims: jobs.iter().map(|j| u64::from(j.reclaims)).sum(),
            resizes: jobs.iter().map(|j| u64::from(j.resizes)).sum(),
            resize_gpu_hours: jobs.iter().map(|j| j.resize_gpu_s).sum::<f64>() / 3600.0,
            lost_gpu_hours: lost,
            delivered_gpu_hours: delivered,
            lost_gpu_hours_fraction: if delivered > 0.0 {
                lost / delivered
            } else {
                0.0
            },
            guarantee_wait_s: Percentiles::of(
                jobs.iter()
                    .filter(|j| j.within_guarantee)
                    .filter_map(|j| Some(j.first_start? - j.trace.submit_s))
                    .collect(),
            ),
            estimates: estimate_error(run),
            passes: run.passes,
            forecasts: run.forecasts,
            forecast_passes: run.forecast_passes,
            took_s: run.wall.as_secs_f64(),
        }
    }
}

/// GPU-time held while jobs were being submitted over the fleet's.
fn busy_while_submitting(run: &Run) -> f64 {
    let (from, to) = run.window;
    if to <= from {
        return 0.0;
    }
    run.window_held_gpu_s / (f64::from(run.gpus) * (to - from))
}

fn estimate_error(run: &Run) -> EstimateError {
    let (mut all, mut waited, mut later) = (Vec::new(), Vec::new(), Vec::new());
    let (mut estimated, mut without) = (0, 0);
    for j in &run.jobs {
        let Some((made, estimate)) = &j.estimate else {
            continue;
        };
        match (estimate, j.first_start) {
            (Ok(at), Some(start)) => {
                estimated += 1;
                let wait = start - made;
                let error = if wait > 0.0 {
                    (at - start).abs() / wait
                } else {
                    0.0
                };
                all.push(error);
                if wait >= MIN_WAIT_S {
                    waited.push(error);
                    later.extend(
                        j.later
                            .iter()
                            .filter(|(made, _)| start > *made)
                            .map(|(made, at)| (at - start).abs() / (start - made)),
                    );
                }
            }
            (Ok(_), None) => estimated += 1,
            (Err(_), _) => without += 1,
        }
    }
    EstimateError {
        estimated,
        without,
        all: ErrorShare::of(all),
        waited: ErrorShare::of(waited),
        later: ErrorShare::of(later),
        min_wait_s: MIN_WAIT_S,
    }
}

/// Seconds as `45s`, `12m`, `3.4h`, `2.1d`.
fn span(s: f64) -> String {
    match s {
        s if s < 60.0 => format!("{s:.0}s"),
        s if s < 3600.0 => format!("{:.0}m", s / 60.0),
        s if s < 86_400.0 => format!("{:.1}h", s / 3600.0),
        s => format!("{:.1}d", s / 86_400.0),
    }
}

/// A figure's name and its value under each policy.
type Rows = Vec<(String, Vec<String>)>;

/// The policies side by side, one row per figure.
pub fn table(outcomes: &[Outcome]) -> String {
    let policies: Vec<&str> = outcomes.iter().map(|o| o.policy.as_str()).collect();
    layout(&policies, figures(outcomes))
}

/// Every key of `map` in any outcome, sorted.
fn keys<V>(outcomes: &[Outcome], map: impl Fn(&Outcome) -> &BTreeMap<String, V>) -> Vec<String> {
    outcomes
        .iter()
        .flat_map(|o| map(o).keys().cloned())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

fn figures(outcomes: &[Outcome]) -> Rows {
    let mut rows: Rows = Vec::new();
    let mut row = |name: String, f: &dyn Fn(&Outcome) -> String| {
        rows.push((name, outcomes.iter().map(f).collect()));
    };
    row("jobs finished".into(), &|o| {
        format!("{} / {}", o.finished, o.jobs)
    });
    row("makespan".into(), &|o| span(o.makespan_s));
    row("utilization".into(), &|o| {
        format!("{:.1} %", o.utilization * 100.0)
    });
    row("utilization while submitting".into(), &|o| {
        format!("{:.1} %", o.utilization_while_submitting * 100.0)
    });
    let classes = keys(outcomes, |o| &o.wait_s);
    for class in &classes {
        let c = class.clone();
        row(format!("wait {class} p50/p95/p99"), &move |o| {
            o.wait_s
                .get(&c)
                .map(|p| format!("{} / {} / {}", span(p.p50), span(p.p95), span(p.p99)))
                .unwrap_or_else(|| "-".into())
        });
    }
    for class in &classes {
        let c = class.clone();
        row(format!("completion {class} p50/p95"), &move |o| {
            o.completion_s
                .get(&c)
                .map(|p| format!("{} / {}", span(p.p50), span(p.p95)))
                .unwrap_or_else(|| "-".into())
        });
    }
    let teams = keys(outcomes, |o| &o.wait_s_by_team);
    for team in &teams {
        let t = team.clone();
        row(format!("wait {team} p50/p95"), &move |o| {
            o.wait_s_by_team
                .get(&t)
                .map(|p| format!("{} / {}", span(p.p50), span(p.p95)))
                .unwrap_or_else(|| "-".into())
        });
    }
    row("preemptions (reclaims)".into(), &|o| {
        format!("{} ({})", o.preemptions, o.reclaims)
    });
    row("resizes (GPU-hours they cost)".into(), &|o| {
        format!("{} ({:.0})", o.resizes, o.resize_gpu_hours)
    });
    row("GPU-hours lost / delivered".into(), &|o| {
        format!(
            "{:.0} / {:.0} ({:.3} %)",
            o.lost_gpu_hours,
            o.delivered_gpu_hours,
            o.lost_gpu_hours_fraction * 100.0
        )
    });
    row("to guaranteed GPUs p50/p95/p99".into(), &|o| {
        let p = o.guarantee_wait_s;
        format!("{} / {} / {}", span(p.p50), span(p.p95), span(p.p99))
    });
    let share = |e: &ErrorShare, what: &str| {
        format!(
            "{:.1} % / {:.1} % ({} {what})",
            e.median * 100.0,
            e.p90 * 100.0,
            e.judged
        )
    };
    row("estimate error p50/p90, all".into(), &|o| {
        share(&o.estimates.all, "jobs")
    });
    row("  those waiting >= 5m".into(), &|o| {
        share(&o.estimates.waited, "jobs")
    });
    row("  their later estimates".into(), &|o| {
        share(&o.estimates.later, "looks")
    });
    row("estimated (without one)".into(), &|o| {
        format!("{} ({})", o.estimates.estimated, o.estimates.without)
    });
    row("passes (forecast passes)".into(), &|o| {
        format!("{} ({})", o.passes, o.forecast_passes)
    });
    row("took".into(), &|o| format!("{:.2} s", o.took_s));
    rows
}

/// `rows` under a header of `policies`, each column as wide as its widest.
fn layout(policies: &[&str], rows: Rows) -> String {
    let width = rows.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let cols: Vec<usize> = (0..policies.len())
        .map(|i| {
            rows.iter()
                .map(|(_, v)| v[i].len())
                .chain(std::iter::once(policies[i].len()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = format!("{:width$}", "");
    for (policy, w) in policies.iter().zip(&cols) {
        out.push_str(&format!("  {policy:>w$}"));
    }
    out.push('\n');
    for (name, values) in rows {
        out.push_str(&format!("{name:width$}"));
        for (v, w) in values.iter().zip(&cols) {
            out.push_str(&format!("  {v:>w$}"));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let p = Percentiles::of((1..=100).map(f64::from).collect());
        assert_eq!((p.count, p.p50, p.p95, p.p99), (100, 50.0, 95.0, 99.0));
        assert_eq!(Percentiles::of(vec![]).count, 0);
        assert_eq!(span(90.0), "2m");
        assert_eq!(span(5400.0), "1.5h");
    }
}
