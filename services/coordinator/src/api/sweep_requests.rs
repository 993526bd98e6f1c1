//! What CreateSweep must hold before anything is written: the base config,
//! the space (each value tried on the base config), the searcher, the
//! objective and the budget.

use super::error::ApiError;
use super::training_requests::{
    check_cap, checked_key_and_config, priority_of, DEFAULT_MAX_RESTARTS,
};
use crate::model::{
    Direction, GpuRequest, Objective, Principal, Searcher, Sweep, SweepState, TrialTemplate,
    FRONTIER, SAE_METRICS,
};
use crate::policy::PriorityClasses;
use cohort_proto::v1;
use cohort_spec::sweep::{apply, display, Distribution, Params, Space};
use cohort_spec::Workload;
use tonic::Status;

/// The most trials of one sweep.
pub const MAX_TRIALS: i32 = 1024;
/// The most trials of one sweep not ended at once.
pub const MAX_CONCURRENT: i32 = 64;
/// Trials of a RANDOM sweep when the request does not say.
const DEFAULT_RANDOM_TRIALS: i32 = 16;
const DEFAULT_CONCURRENT: i32 = 4;
/// The trials' priority class when the request names none (always defined).
const DEFAULT_TRIAL_CLASS: &str = "low";
/// ASHA's reduction factor when the request does not say.
const DEFAULT_ETA: f64 = 3.0;
/// Draws each value of the space is tried against when the sweep is created.
const PROBE_DRAWS: u64 = 8;

/// A checked CreateSweep: the sweep to store (its id given here).
pub fn validate_create(
    who: &Principal,
    classes: &PriorityClasses,
    cap: Option<&str>,
    req: v1::CreateSweepRequest,
) -> Result<Sweep, Status> {
    let config = checked_key_and_config(&req.request_id, req.config)?;
    let space = cohort_proto::sweep::space_from_proto(req.space)
        .map_err(|e| ApiError::field(e.field, e.reason))?;
    let (searcher, eta) = searcher_and_eta(req.searcher, req.eta)?;
    let objective = objective(&config, req.objective, searcher)?;
    let grid = match searcher {
        Searcher::Grid => Some(
            space
                .grid()
                .map_err(|e| ApiError::field(e.field, e.reason))?,
        ),
        Searcher::Random | Searcher::Asha | Searcher::Median => None,
    };
    let (max_trials, max_concurrent) = budget(
        (req.max_trials, req.max_concurrent, req.max_gpu_hours),
        grid.as_deref(),
    )?;
    let max_restarts = req.max_restarts.unwrap_or(DEFAULT_MAX_RESTARTS);
    if max_restarts < 0 {
        return Err(ApiError::field("max_restarts", "must be >= 0").into());
    }
    let gpu_request = GpuRequest::try_from(req.gpus).map_err(ApiError::from)?;
    if gpu_request.selection.is_elastic() {
        // Each trial's config may split its global batch differently.
        return Err(ApiError::field(
            "gpus.min_count",
            "a sweep's trials run on a fixed count, auto or ids; elastic trials are not offered",
        )
        .into());
    }
    // Trials are preemptible unless asked otherwise: search is what a
    // shared fleet runs on idle GPUs.
    let class = match req.priority_class.as_str() {
        "" => DEFAULT_TRIAL_CLASS,
        asked => asked,
    };
    let (priority, priority_class) = priority_of(classes, class, 0)?;
    check_cap(classes, who.team(), cap, priority, &priority_class)?;
    let seed = match req.seed {
        0 => random_seed(),
        s => s,
    };
    match &grid {
        Some(grid) => check_grid(&config, grid)?,
        None => check_values(&config, &space, seed)?,
    }
    Ok(Sweep {
        id: format!("swp-{}", uuid::Uuid::new_v4().simple()),
        request_id: Some(req.request_id).filter(|r| !r.is_empty()),
        team: who.team().to_string(),
        creator: who.actor().1,
        display_name: req.display_name,
        config,
        space,
        searcher,
        eta,
        seed,
        objective,
        max_trials,
        max_concurrent,
        max_gpu_hours: req.max_gpu_hours,
        trial: TrialTemplate {
            gpu_request,
            priority,
            priority_class,
            max_restarts,
        },
        state: SweepState::Running,
        state_reason: "started".into(),
        create_time: chrono::Utc::now(),
        end_time: None,
    })
}

/// The searcher asked for, and ASHA's eta (0 for the others).
fn searcher_and_eta(raw: i32, eta: f64) -> Result<(Searcher, f64), Status> {
    let searcher = match v1::Searcher::try_from(raw) {
        Ok(v1::Searcher::Unspecified | v1::Searcher::Random) => Searcher::Random,
        Ok(v1::Searcher::Grid) => Searcher::Grid,
        Ok(v1::Searcher::Asha) => Searcher::Asha,
        Ok(v1::Searcher::Median) => Searcher::Median,
        Err(_) => {
            return Err(ApiError::field("searcher", format!("{raw} is not a searcher")).into())
        }
    };
    let eta = match (searcher, eta) {
        (Searcher::Asha, 0.0) => DEFAULT_ETA,
        (Searcher::Asha, e) if (2.0..=10.0).contains(&e) => e,
        (Searcher::Asha, _) => {
            return Err(ApiError::field("eta", "ASHA's reduction factor: 2 to 10 (0: 3)").into())
        }
        (_, 0.0) => 0.0,
        (_, _) => return Err(ApiError::field("eta", "only the ASHA searcher takes eta").into()),
    };
    Ok((searcher, eta))
}

/// `max_trials` (defaulted to the grid's size, or 16) and
/// `max_concurrent`, with `max_gpu_hours` checked.
fn budget(
    (trials, concurrent, gpu_hours): (i32, i32, f64),
    grid: Option<&[Params]>,
) -> Result<(i32, i32), Status> {
    let max_trials = match (trials, grid) {
        (n, _) if !(0..=MAX_TRIALS).contains(&n) => {
            return Err(ApiError::field("max_trials", format!("0 to {MAX_TRIALS}")).into())
        }
        (0, Some(g)) => g.len() as i32,
        (0, None) => DEFAULT_RANDOM_TRIALS,
        (n, Some(g)) if n as usize > g.len() => {
            return Err(
                ApiError::field("max_trials", format!("the grid has {} trials", g.len())).into(),
            )
        }
        (n, _) => n,
    };
    let max_concurrent = match concurrent {
        0 => DEFAULT_CONCURRENT,
        n if (1..=MAX_CONCURRENT).contains(&n) => n,
        _ => {
            return Err(ApiError::field("max_concurrent", format!("0 to {MAX_CONCURRENT}")).into())
        }
    };
    if !gpu_hours.is_finite() || gpu_hours < 0.0 {
        return Err(ApiError::field("max_gpu_hours", "a number >= 0 (0: no limit)").into());
    }
    Ok((max_trials, max_concurrent))
}

fn random_seed() -> u64 {
    let mut bytes = [0u8; 8];
    // A clock-derived seed if the OS has no randomness to give.
    if getrandom::fill(&mut bytes).is_err() {
        return chrono::Utc::now().timestamp_micros() as u64 | 1;
    }
    u64::from_le_bytes(bytes) | 1
}

/// The objective asked for: a metric the trainings report (any name for a
/// program; the built-in SAE's own for an SAE) and its direction.
fn objective(
    config: &Workload,
    raw: Option<v1::SweepObjective>,
    searcher: Searcher,
) -> Result<Objective, Status> {
    let raw = raw.ok_or_else(|| ApiError::field("objective", "required"))?;
    let metric = raw.metric.trim().to_string();
    if metric.is_empty() || metric.len() > 64 {
        return Err(
            ApiError::field("objective.metric", "a metric name of 1 to 64 characters").into(),
        );
    }
    if metric == FRONTIER {
        return frontier(raw.direction, searcher);
    }
    let natural = match config {
        Workload::Sae(_) => SAE_METRICS
            .iter()
            .find(|(name, _)| *name == metric)
            .map(|(_, d)| *d)
            .ok_or_else(|| {
                let names: Vec<&str> = SAE_METRICS.iter().map(|(n, _)| *n).collect();
                ApiError::field(
                    "objective.metric",
                    format!(
                        "the built-in SAE reports no metric {metric:?}; it reports {} (or use {FRONTIER})",
                        names.join(", ")
                    ),
                )
            })?,
        Workload::Program(_) => Direction::Minimize,
    };
    use v1::sweep_objective::Direction as D;
    let direction = match D::try_from(raw.direction) {
        Ok(D::Unspecified) => natural,
        Ok(D::Minimize) => Direction::Minimize,
        Ok(D::Maximize) => Direction::Maximize,
        Err(_) => {
            return Err(ApiError::field(
                "objective.direction",
                format!("{} is not a direction", raw.direction),
            )
            .into())
        }
    };
    Ok(Objective { metric, direction })
}

/// The frontier objective: its directions are its own (lower L0, higher
/// explained variance), and the median rule has no median of a frontier.
fn frontier(direction: i32, searcher: Searcher) -> Result<Objective, Status> {
    if direction != v1::sweep_objective::Direction::Unspecified as i32 {
        return Err(ApiError::field(
            "objective.direction",
            "the frontier has its own directions (lower L0, higher explained variance): leave it unset",
        )
        .into());
    }
    if searcher == Searcher::Median {
        return Err(ApiError::field(
            "objective.metric",
            "the median searcher ranks on one metric: use grid, random or asha with the frontier",
        )
        .into());
    }
    Ok(Objective {
        metric: FRONTIER.to_string(),
        direction: Direction::Maximize,
    })
}

fn invalid_combination(params: &Params, e: cohort_spec::ConfigError) -> Status {
    let combo: Vec<String> = params
        .iter()
        .map(|(k, v)| format!("{k}={}", display(v)))
        .collect();
    ApiError::field(
        "space",
        format!("{} gives a config that is not valid: {e}", combo.join(" ")),
    )
    .into()
}

/// Every combination of a grid applied to the base config.
fn check_grid(config: &Workload, grid: &[Params]) -> Result<(), Status> {
    for params in grid {
        apply(config, params).map_err(|e| invalid_combination(params, e))?;
    }
    Ok(())
}

/// Each bound and choice of a random space, tried with the other values of
/// the first draws: refused when it gives a valid config with none of them.
fn check_values(config: &Workload, space: &Space, seed: u64) -> Result<(), Status> {
    let draws: Vec<Params> = (0..PROBE_DRAWS).map(|i| space.sample(seed, i)).collect();
    for (key, distribution) in space.iter() {
        for value in extremes(distribution) {
            let mut last = None;
            let fits = draws.iter().any(|draw| {
                let mut params = draw.clone();
                params.insert(key.clone(), value.clone());
                apply(config, &params).map_err(|e| last = Some(e)).is_ok()
            });
            if !fits {
                let why = last.map_or_else(String::new, |e| e.to_string());
                return Err(ApiError::field(
                    format!("space[{key}]"),
                    format!(
                        "{} gives a config that is not valid: {why}",
                        display(&value)
                    ),
                )
                .into());
            }
        }
    }
    Ok(())
}

/// The values a distribution is checked at: its bounds, or every choice.
fn extremes(d: &Distribution) -> Vec<serde_json::Value> {
    let number = |x: f64| {
        serde_json::Number::from_f64(x).map_or(serde_json::Value::Null, serde_json::Value::Number)
    };
    match d {
        Distribution::Uniform { low, high } | Distribution::LogUniform { low, high } => {
            vec![number(*low), number(*high)]
        }
        Distribution::IntUniform { low, high } => vec![(*low).into(), (*high).into()],
        Distribution::Choice(values) => values.clone(),
    }
}
