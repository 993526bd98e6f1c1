//! `cohort sweep create|get|list|cancel` (SweepService): a sweep is stored
//! on the coordinator, whose searcher starts its trials; `create` prints
//! the sweep's id (scripts depend on that).

use crate::client::Coordinator;
use crate::errors::CliError;
use crate::render::table::{dash, state_name, Table};
use crate::render::{emit, emit_json, json, time, OutputFormat};
use clap::{Args, Subcommand, ValueEnum};
use cohort_proto::v1::{self, sweep_service_client::SweepServiceClient};
use cohort_spec::sweep::Space;
use cohort_spec::Workload;
use serde_json::Value;
use std::path::PathBuf;

#[derive(Debug, Clone, Subcommand)]
pub enum SweepCommand {
    /// Create a sweep: its searcher starts trainings of CONFIG over the
    /// space; prints the sweep's id.
    Create(CreateArgs),
    /// A sweep with its trials, their params and objective values, and
    /// the best trials.
    Get {
        /// The sweep's id (`swp-...`).
        id: String,
    },
    /// Your team's sweeps, newest first.
    List {
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: i32,
    },
    /// Cancel a sweep and every trial of it not ended.
    Cancel {
        id: String,
        /// Recorded in the sweep's and its trials' state reasons.
        #[arg(long)]
        reason: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SearcherArg {
    /// Seeded independent draws from the space.
    Random,
    /// Every combination (choice and int_uniform parameters only).
    Grid,
    /// Random draws, stopped early by asynchronous successive halving
    /// (rungs at a trial's steps / eta^k, ..., / eta: k the most with
    /// eta^k <= max-trials, 2 to 5).
    Asha,
    /// Random draws, stopped early when worse than the median at a
    /// quarter, a half or three quarters of their steps.
    Median,
}

#[derive(Debug, Clone, Args)]
pub struct CreateArgs {
    /// The base config (TOML, or `.json`).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// The search space (TOML): one key per config path, e.g.
    /// `"model.l1_coefficient" = { log_uniform = [1e-4, 1e-2] }`.
    #[arg(long, value_name = "FILE")]
    pub space: PathBuf,
    #[arg(long, value_enum, default_value_t = SearcherArg::Random)]
    pub searcher: SearcherArg,
    /// ASHA's reduction factor (2 to 10; default 3).
    #[arg(long, value_name = "ETA")]
    pub eta: Option<f64>,
    /// The metric the best trials are chosen by: loss, mse, l1, l0,
    /// explained_variance, dead_fraction (a program's: any it reports); or
    /// `frontier`: the trials on the L0 / explained-variance frontier.
    #[arg(long, value_name = "METRIC")]
    pub objective: String,
    /// Lower is better (the default but for explained_variance).
    #[arg(long, conflicts_with = "maximize")]
    pub minimize: bool,
    /// Higher is better.
    #[arg(long)]
    pub maximize: bool,
    /// Trials in all (default: the grid's size, or 16).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub max_trials: i32,
    /// Trials not ended at once (default 4).
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub max_concurrent: i32,
    /// GPU-hours the trials may spend (default: no limit).
    #[arg(long, value_name = "H", default_value_t = 0.0)]
    pub max_gpu_hours: f64,
    /// GPUs per trial (default: as many as fit).
    #[arg(long, value_name = "G", value_parser = clap::value_parser!(i32).range(1..))]
    pub gpus: Option<i32>,
    /// The random searcher's seed (default: one is chosen and shown).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Every trial's priority class (default: low, preemptible).
    #[arg(long)]
    pub priority_class: Option<String>,
    #[arg(long)]
    pub name: Option<String>,
    /// A retried create with the same id creates nothing twice.
    #[arg(long)]
    pub request_id: Option<String>,
}

fn request(args: &CreateArgs) -> Result<v1::CreateSweepRequest, CliError> {
    let config = Workload::from_file(&args.config).map_err(CliError::Config)?;
    let text = std::fs::read_to_string(&args.space).map_err(|e| {
        CliError::Usage(format!("cannot read --space {}: {e}", args.space.display()))
    })?;
    let space = Space::from_toml(&text)
        .map_err(|e| CliError::Usage(format!("--space {}: {e}", args.space.display())))?;
    use v1::sweep_objective::Direction;
    let direction = match (args.minimize, args.maximize) {
        (true, _) => Direction::Minimize,
        (_, true) => Direction::Maximize,
        _ => Direction::Unspecified,
    };
    Ok(v1::CreateSweepRequest {
        config: Some(v1::TrainingConfig::from(&config)),
        space: cohort_proto::sweep::space_to_proto(&space),
        searcher: match args.searcher {
            SearcherArg::Random => v1::Searcher::Random,
            SearcherArg::Grid => v1::Searcher::Grid,
            SearcherArg::Asha => v1::Searcher::Asha,
            SearcherArg::Median => v1::Searcher::Median,
        } as i32,
        eta: args.eta.unwrap_or(0.0),
        seed: args.seed,
        objective: Some(v1::SweepObjective {
            metric: args.objective.clone(),
            direction: direction as i32,
        }),
        max_trials: args.max_trials,
        max_concurrent: args.max_concurrent,
        max_gpu_hours: args.max_gpu_hours,
        gpus: Some(v1::GpuRequest {
            selection: args.gpus.map(v1::gpu_request::Selection::Count),
            ..Default::default()
        }),
        priority_class: args.priority_class.clone().unwrap_or_default(),
        max_restarts: None,
        display_name: args.name.clone().unwrap_or_default(),
        request_id: args.request_id.clone().unwrap_or_default(),
    })
}

pub async fn run(
    coordinator: &Coordinator,
    cmd: SweepCommand,
    out: OutputFormat,
) -> Result<(), CliError> {
    let mut client = SweepServiceClient::new(coordinator.channel().await?);
    match cmd {
        SweepCommand::Create(args) => {
            let sweep = client.create_sweep(request(&args)?).await?.into_inner();
            match out {
                OutputFormat::Json => emit_json(&json::message(&sweep)),
                OutputFormat::Table => emit(&sweep.id),
            }
        }
        SweepCommand::Get { id } => {
            let sweep = client
                .get_sweep(v1::GetSweepRequest { id })
                .await?
                .into_inner();
            match out {
                OutputFormat::Json => emit_json(&json::message(&sweep)),
                OutputFormat::Table => emit(&describe(&sweep)),
            }
        }
        SweepCommand::List { limit } => {
            let sweeps = client
                .list_sweeps(v1::ListSweepsRequest {
                    page_size: limit,
                    page_token: String::new(),
                })
                .await?
                .into_inner()
                .sweeps;
            match out {
                OutputFormat::Json => emit_json(&serde_json::json!({
                    "sweeps": sweeps.iter().map(json::message).collect::<Vec<Value>>(),
                })),
                OutputFormat::Table => emit(&list_table(&sweeps)),
            }
        }
        SweepCommand::Cancel { id, reason } => {
            let sweep = client
                .cancel_sweep(v1::CancelSweepRequest {
                    id,
                    reason: reason.unwrap_or_default(),
                })
                .await?
                .into_inner();
            match out {
                OutputFormat::Json => emit_json(&json::message(&sweep)),
                OutputFormat::Table => emit(&format!(
                    "sweep {} {}: {}",
                    sweep.id,
                    sweep_state(sweep.state),
                    sweep.state_reason
                )),
            }
        }
    }
}

fn sweep_state(raw: i32) -> String {
    v1::sweep::State::try_from(raw)
        .map(|s| s.as_str_name().to_string())
        .unwrap_or_else(|_| raw.to_string())
}

fn searcher_name(raw: i32) -> String {
    v1::Searcher::try_from(raw)
        .map(|s| s.as_str_name().to_lowercase())
        .unwrap_or_else(|_| raw.to_string())
}

fn objective_text(o: Option<&v1::SweepObjective>) -> String {
    o.map_or("-".into(), |o| {
        if o.metric == FRONTIER {
            return "the L0 / explained-variance frontier".into();
        }
        let way = match v1::sweep_objective::Direction::try_from(o.direction) {
            Ok(v1::sweep_objective::Direction::Maximize) => "maximize",
            _ => "minimize",
        };
        format!("{way} {}", o.metric)
    })
}

/// A param's value as the table shows it: a float to 4 decimals, or 4
/// digits in e-notation when small or large (`-o json` has it whole).
fn value_text(v: &prost_types::Value) -> String {
    match cohort_proto::sweep::from_proto_value(v) {
        Value::Number(n) if n.is_f64() => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            if x != 0.0 && !(1e-2..1e4).contains(&x.abs()) {
                format!("{x:.3e}")
            } else {
                format!("{}", (x * 1e4).round() / 1e4)
            }
        }
        other => cohort_spec::sweep::display(&other),
    }
}

/// A trial's rung records: `1:0.4123@200 2:0.3871@600`.
fn rungs_text(rungs: &[v1::SweepRung]) -> String {
    if rungs.is_empty() {
        return "-".into();
    }
    rungs
        .iter()
        .map(|r| match r.l0 {
            Some(l0) => format!("{}:{:.4}/L0 {l0:.1}@{}", r.rung, r.value, r.step),
            None => format!("{}:{:.4}@{}", r.rung, r.value, r.step),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The best trial and its value, and how many are ranked.
fn best_text(s: &v1::Sweep) -> String {
    let Some(first) = s.best.first() else {
        return "- (no trial reported the objective yet)".into();
    };
    if is_frontier(s) {
        return format!(
            "{} on the frontier (hypervolume {:.4}), sparsest first: {}",
            s.best.len(),
            s.frontier_hypervolume,
            s.best.join(", ")
        );
    }
    let value = s
        .trials
        .iter()
        .find(|t| &t.training_id == first)
        .and_then(|t| t.objective)
        .map_or(String::new(), |v| format!(" ({v:.6})"));
    let metric = s.objective.as_ref().map_or("", |o| o.metric.as_str());
    format!("{first}{value} {metric}; {} ranked", s.best.len())
}

fn list_table(sweeps: &[v1::Sweep]) -> String {
    if sweeps.is_empty() {
        return "no sweeps".into();
    }
    let mut t = Table::new(&[
        "ID",
        "NAME",
        "STATE",
        "SEARCHER",
        "OBJECTIVE",
        "TRIALS",
        "CREATED",
    ]);
    for s in sweeps {
        t.row(vec![
            s.id.clone(),
            dash(&s.display_name),
            sweep_state(s.state),
            searcher_name(s.searcher),
            objective_text(s.objective.as_ref()),
            format!("max {} ({} at once)", s.max_trials, s.max_concurrent),
            time(s.create_time.as_ref()),
        ]);
    }
    t.render()
}

/// The objective that ranks trials by the L0 / explained-variance frontier.
const FRONTIER: &str = "frontier";

fn is_frontier(s: &v1::Sweep) -> bool {
    s.objective.as_ref().is_some_and(|o| o.metric == FRONTIER)
}

/// `sweep get`: the sweep, then a row per trial, best marked.
pub fn describe(s: &v1::Sweep) -> String {
    let budget = if s.max_gpu_hours > 0.0 {
        format!("{:.3} of {} GPU-hours", s.gpu_hours, s.max_gpu_hours)
    } else {
        format!("{:.3} GPU-hours (no limit)", s.gpu_hours)
    };
    let mut lines = vec![
        format!("id:          {}", s.id),
        format!("state:       {}", sweep_state(s.state)),
        format!("reason:      {}", dash(&s.state_reason)),
        format!(
            "searcher:    {} (seed {})",
            searcher_name(s.searcher),
            s.seed
        ),
        format!("objective:   {}", objective_text(s.objective.as_ref())),
        format!(
            "trials:      {} started of at most {}, {} at once",
            s.trials.len(),
            s.max_trials,
            s.max_concurrent
        ),
        format!("spent:       {budget}"),
        format!("best:        {}", best_text(s)),
        String::new(),
    ];
    if s.trials.is_empty() {
        lines.push("no trials yet".into());
        return lines.join("\n");
    }
    let frontier = is_frontier(s);
    let mut t = Table::new(&[
        "#",
        "TRAINING",
        "STATE",
        "STEP",
        if frontier { "DISTANCE" } else { "OBJECTIVE" },
        "L0",
        "EV",
        "RUNGS",
        "PARAMS",
        "REASON",
    ]);
    for trial in &s.trials {
        let params = trial.params.as_ref().map_or(String::new(), |p| {
            let mut kv: Vec<(&String, &prost_types::Value)> = p.fields.iter().collect();
            kv.sort_by(|a, b| a.0.cmp(b.0));
            kv.iter()
                .map(|(k, v)| format!("{k}={}", value_text(v)))
                .collect::<Vec<_>>()
                .join(" ")
        });
        let best = match frontier {
            true => trial.on_frontier,
            false => s.best.first() == Some(&trial.training_id),
        };
        let mark = if best { " *" } else { "" };
        let state = match trial.paused {
            true => "PAUSED".to_string(),
            false => state_name(trial.state),
        };
        t.row(vec![
            trial.index.to_string(),
            format!("{}{mark}", trial.training_id),
            state,
            trial.step.to_string(),
            trial.objective.map_or("-".into(), |v| format!("{v:.6}")),
            trial.l0.map_or("-".into(), |v| format!("{v:.1}")),
            trial
                .explained_variance
                .map_or("-".into(), |v| format!("{v:.4}")),
            rungs_text(&trial.rungs),
            params,
            dash(&trial.state_reason),
        ]);
    }
    lines.push(t.render());
    lines.push(match frontier {
        true => "* on the frontier; DISTANCE: to the frontier (0 on it)".into(),
        false => "* the best trial so far".into(),
    });
    lines.join("\n")
}
