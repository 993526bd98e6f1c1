//! `cohort-sim`: the coordinator's own scheduling policy replayed over a job
//! trace on virtual time — no processes, no database, no sleeps — over a
//! described fleet, several policies side by side (docs/scheduling.md).
//!
//! ```text
//! cohort-sim generate --jobs N --seed S [--teams T] [--urgent-fraction F] --out FILE
//! cohort-sim run FILE --fleet 32x8 --policy fifo-backfill --policy sharing [-o json]
//! cohort-sim forecast-cost --agents 1000 --gpus-per-agent 8 --queued 10000
//! ```

mod cost;
mod engine;
mod fleet;
mod generate;
mod jobs_out;
mod outcome;
mod scenario;
mod trace;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand, ValueEnum};
use cohort_coordinator::policy::TeamShare;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "cohort-sim",
    version,
    about = "The coordinator's scheduling policy over a job trace, on virtual time"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    Table,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Write a synthetic trace (distributions: docs/scheduling.md).
    Generate(GenerateArgs),
    /// Simulate a trace under each --policy.
    Run(RunArgs),
    /// Time one scheduling pass and one forecast (an estimate refresh)
    /// over a full fleet with a long queue.
    ForecastCost(CostArgs),
}

#[derive(clap::Args)]
struct GenerateArgs {
    #[arg(long)]
    jobs: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 4)]
    teams: usize,
    /// The share of urgent jobs.
    #[arg(long, default_value_t = 0.1)]
    urgent_fraction: f64,
    /// The GPUs the trace's load is for.
    #[arg(long, default_value_t = 256)]
    fleet_gpus: u32,
    /// Offered work over what the fleet can run on weekdays (above 1:
    /// demand above supply; weekends offer 0.4).
    #[arg(long, default_value_t = 1.25)]
    load: f64,
    /// The share of jobs that say how long they run.
    #[arg(long, default_value_t = 1.0)]
    expected_fraction: f64,
    /// How far off what they say is: the sigma of a log-normal factor.
    #[arg(long, default_value_t = 0.25)]
    expected_noise: f64,
    /// `.jsonl` (JSON lines) or `.csv`.
    #[arg(long)]
    out: PathBuf,
}

#[derive(clap::Args)]
struct RunArgs {
    /// The trace: `.jsonl` or `.csv`.
    trace: PathBuf,
    /// `HOSTSxGPUS` (e.g. 32x8) or a TOML file of hosts.
    #[arg(long, default_value = "32x8")]
    fleet: String,
    /// fifo-backfill or sharing, with :no-preemption, :no-lending,
    /// :no-fair-share, :no-quotas or :hard-caps (repeatable; side by side).
    #[arg(long = "policy", required = true)]
    policies: Vec<String>,
    /// A team's quota, TEAM=GUARANTEE[:BORROW[:WEIGHT]] (repeatable);
    /// none: the fleet shared equally, each free to borrow all of it.
    #[arg(long = "quota")]
    quotas: Vec<String>,
    /// A notice's grace, seconds.
    #[arg(long, default_value_t = 60.0)]
    grace_s: f64,
    /// How long a job that saves on notice takes to checkpoint and stop.
    #[arg(long, default_value_t = 20.0)]
    notice_checkpoint_s: f64,
    /// Seconds of every attempt that train nothing.
    #[arg(long, default_value_t = 0.0)]
    restart_overhead_s: f64,
    /// A training younger than this is not preempted by priority.
    #[arg(long, default_value_t = 600.0)]
    preemption_min_runtime_s: f64,
    /// After this much running a job's pace (its end) is known to the
    /// scheduler; before, only its expected duration.
    #[arg(long, default_value_t = 60.0)]
    pace_after_s: f64,
    /// Start-time estimates (a forecast) for newly submitted jobs still
    /// waiting after their pass, at most this often (virtual seconds;
    /// 0: none).
    #[arg(long, default_value_t = 60.0)]
    estimate_every_s: f64,
    /// Fair share's half-life, seconds.
    #[arg(long, default_value_t = 7.0 * 86_400.0)]
    half_life_s: f64,
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    output: Output,
    /// Also write every job's life to DIR/<policy>.jsonl.
    #[arg(long)]
    jobs_out: Option<PathBuf>,
}

#[derive(clap::Args)]
struct CostArgs {
    #[arg(long, default_value_t = 1000)]
    agents: u32,
    #[arg(long, default_value_t = 8)]
    gpus_per_agent: u32,
    #[arg(long, default_value_t = 10_000)]
    queued: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Times to measure each.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    output: Output,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Generate(args) => generate_trace(args),
        Command::Run(args) => run_trace(args),
        Command::ForecastCost(args) => forecast_cost(args),
    }
}

/// `cohort-sim generate`.
fn generate_trace(args: GenerateArgs) -> anyhow::Result<()> {
    let GenerateArgs {
        jobs,
        seed,
        teams,
        urgent_fraction,
        fleet_gpus,
        load,
        expected_fraction,
        expected_noise,
        out,
    } = args;
    if !(0.0..=1.0).contains(&urgent_fraction) || !(0.0..=1.0).contains(&expected_fraction) {
        bail!("--urgent-fraction and --expected-fraction are between 0 and 1");
    }
    if teams == 0 || !(load.is_finite() && load > 0.0) {
        bail!("--teams >= 1 and --load > 0");
    }
    let trace = generate::generate(&generate::Spec {
        jobs,
        seed,
        teams,
        urgent_fraction,
        fleet_gpus,
        load,
        expected_fraction,
        expected_noise: expected_noise.max(0.0),
    });
    trace::write(&out, &trace).with_context(|| format!("writing {}", out.display()))?;
    eprintln!("wrote {} jobs to {}", trace.len(), out.display());
    Ok(())
}

/// `cohort-sim forecast-cost`.
fn forecast_cost(args: CostArgs) -> anyhow::Result<()> {
    let CostArgs {
        agents,
        gpus_per_agent,
        queued,
        seed,
        repeat,
        output,
    } = args;
    if agents == 0 || gpus_per_agent == 0 {
        bail!("--agents and --gpus-per-agent are at least 1");
    }
    let c = cost::measure(&cost::CostSpec {
        agents,
        gpus_per_agent,
        queued,
        seed,
        repeat,
    })
    .map_err(anyhow::Error::msg)?;
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&c)?),
        Output::Table => print!("{}", cost::table(&c)),
    }
    Ok(())
}

/// `cohort-sim run`: each policy over the trace, side by side.
fn run_trace(args: RunArgs) -> anyhow::Result<()> {
    let RunArgs {
        trace,
        fleet,
        policies,
        quotas,
        grace_s,
        notice_checkpoint_s,
        restart_overhead_s,
        preemption_min_runtime_s,
        pace_after_s,
        estimate_every_s,
        half_life_s,
        output,
        jobs_out,
    } = args;
    let jobs = trace::read(&trace)?;
    let fleet = fleet::FleetSpec::parse(&fleet).map_err(anyhow::Error::msg)?;
    let min_runtime = Duration::from_secs_f64(preemption_min_runtime_s.max(0.0));
    let runs = policies
        .iter()
        .map(|p| scenario::PolicyRun::parse(p, min_runtime))
        .collect::<Result<Vec<_>, _>>()
        .map_err(anyhow::Error::msg)?;
    let given: Vec<(String, TeamShare)> = quotas
        .iter()
        .map(|q| scenario::parse_quota(q))
        .collect::<Result<_, _>>()
        .map_err(anyhow::Error::msg)?;
    let teams: BTreeSet<String> = jobs.iter().map(|j| j.team.clone()).collect();
    let quotas = scenario::quotas(&given, &teams, fleet.gpus());
    let guarantees = quotas
        .iter()
        .map(|(t, s)| (t.clone(), s.guarantee.unwrap_or(0)))
        .collect();
    let settings = engine::Settings {
        grace_s,
        notice_checkpoint_s,
        restart_overhead_s,
        pace_after_s: pace_after_s.max(0.0),
        half_life: Duration::from_secs_f64(half_life_s.max(1.0)),
        estimate_every_s: (estimate_every_s > 0.0).then_some(estimate_every_s),
    };
    if let Some(dir) = &jobs_out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let outcomes: Vec<outcome::Outcome> = runs
        .iter()
        .map(|run| -> anyhow::Result<outcome::Outcome> {
            let shares = scenario::shares(run, &quotas);
            let result = engine::Engine::new(
                &jobs,
                fleet.view(),
                shares,
                std::collections::HashMap::clone(&guarantees),
                run,
                &settings,
            )
            .run();
            if let Some(dir) = &jobs_out {
                let file = jobs_out::path(dir, &run.name);
                jobs_out::write(&file, &result)
                    .with_context(|| format!("writing {}", file.display()))?;
            }
            Ok(outcome::Outcome::of(&run.name, &result))
        })
        .collect::<anyhow::Result<_>>()?;
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&outcomes)?),
        Output::Table => print!("{}", outcome::table(&outcomes)),
    }
    Ok(())
}
