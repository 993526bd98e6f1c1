use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use cohort_observe::Observability;
use tokio::sync::watch;

use cohort_agent::cli::{host_name, Args, Command, DoctorArgs};
use cohort_agent::probe;
use cohort_agent::telemetry;
use cohort_agent::{Agent, AgentConfig, ClientTls};

/// First reconnect delay; doubles per failure up to `BACKOFF_MAX`.
const BACKOFF_INITIAL: Duration = Duration::from_millis(200);
/// While no coordinator answers, an agent tries at least once a second (each
/// delay jittered): a failover is found within a second of the new leader
/// taking the lease. docs/benchmarks.md shows 1,000 agents reconnecting at
/// once do not overload it.
const BACKOFF_MAX: Duration = Duration::from_secs(1);

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cohort-agent: could not start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The OTLP exporters are built inside the runtime (they need one).
    let observability = match runtime
        .block_on(async { Observability::init("cohort-agent", &args.observability) })
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!("cohort-agent: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match args.command.clone() {
        Some(Command::Doctor(doctor)) => return runtime.block_on(run_doctor(args, doctor)),
        None => runtime.block_on(run(args)),
    };
    runtime.block_on(observability.shutdown());
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cohort-agent: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `cohort-agent doctor`: the report, and exit 0 only when no check failed.
async fn run_doctor(args: Args, doctor: DoctorArgs) -> ExitCode {
    let rank_program = match args.rank_program() {
        Ok(path) => path,
        Err(e) => {
            eprintln!("cohort-agent: {e}");
            return ExitCode::from(2);
        }
    };
    let setup = args.doctor_setup(rank_program, Some(&doctor));
    let report = cohort_agent::doctor::run(&setup, &[]).await;
    if doctor.json {
        match serde_json::to_string_pretty(&report) {
            Ok(json) => println!("{json}"),
            Err(e) => {
                eprintln!("cohort-agent: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        print!("{}", cohort_agent::doctor::render(&report));
    }
    if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let name = args.agent_name();
    let probe = telemetry::share(probe::open(
        args.simulate_gpus.as_ref(),
        &name,
        args.simulate_overrides.as_deref(),
    )?);
    let gpus = telemetry::inventory(&probe)
        .await
        .context("reading the gpu inventory")?;
    if args.probe_once {
        let samples = telemetry::sample(&probe)
            .await
            .context("sampling the gpus")?;
        print!("{}", probe::report::render(&gpus, &samples));
        return Ok(());
    }
    for gpu in &gpus {
        tracing::info!(
            gpu = gpu.index,
            uuid = %gpu.uuid,
            name = %gpu.name,
            memory_mib = gpu.memory_total_bytes >> 20,
            simulated = gpu.simulated,
            "gpu found"
        );
    }
    let config = agent_config(&args, &name).await?;
    if !config.teams.confines_paths() {
        tracing::warn!("no --data-root or --team-data-root: trainings may use any local path this agent can reach");
    }
    tracing::info!(teams = %config.teams.describe(), "what teams' ranks may reach");
    tracing::info!(
        agent = %name,
        coordinator = %config.coordinator,
        gpus = gpus.len(),
        work_dir = %config.work_dir.display(),
        "cohort-agent up"
    );

    let (stop_tx, stop_rx) = watch::channel(false);
    let agent = Agent::new(config, probe, gpus);
    tokio::spawn(reconnect_on_sighup(agent.reloader()));
    let agent = tokio::spawn(agent.run(stop_rx));
    shutdown_signal().await;
    tracing::info!("shutting down: stopping ranks");
    let _ = stop_tx.send(true);
    agent.await.context("the agent task failed")?;
    Ok(())
}

/// The agent's configuration from its flags, after checking what they
/// name: the rank program, Landlock for programs, the work directory.
async fn agent_config(args: &Args, name: &str) -> anyhow::Result<AgentConfig> {
    let rank_program = args.rank_program().map_err(anyhow::Error::msg)?;
    if !rank_program.is_file() {
        tracing::warn!(path = %rank_program.display(), "rank program not found; starting ranks will fail until it exists (see --rank-binary)");
    }
    let confined = args.program_sandbox == cohort_agent::program::sandbox::SandboxMode::Landlock;
    if !args.program_roots.is_empty() || !args.team_program_roots.is_empty() {
        let abi = cohort_agent::program::sandbox::kernel_abi();
        if confined && abi < 1 {
            anyhow::bail!(
                "--program-root needs Landlock to confine programs, and this kernel has none; \
                 pass --program-sandbox none to run programs unconfined"
            );
        }
        tracing::info!(roots = ?args.program_roots, sandbox = ?args.program_sandbox, landlock_abi = abi, "programs run from these roots");
    }
    // Each rank's host memory is held to its limit where the host allows.
    cohort_agent::supervisor::cgroup::init(name);
    let work_dir = args.work_dir();
    tokio::fs::create_dir_all(&work_dir)
        .await
        .with_context(|| format!("creating the work directory {}", work_dir.display()))?;

    let doctor = args.doctor_setup(rank_program.clone(), None);
    Ok(AgentConfig {
        doctor,
        coordinator: args.coordinator.clone(),
        agent_name: name.to_string(),
        host_name: host_name(),
        address: args.address.clone().unwrap_or_default(),
        interval: args.interval,
        work_dir,
        rank_program,
        program_roots: cohort_agent::program::ProgramRoots::resolve(
            &args.program_roots,
            &args
                .team_program_roots
                .iter()
                .map(|(team, dir)| (team.clone(), std::path::PathBuf::from(dir)))
                .collect::<Vec<_>>(),
        )
        .map_err(anyhow::Error::msg)?,
        program_sandbox: args.program_sandbox,
        stop_grace: args.stop_grace,
        resume_fetch: cohort_agent::program::peer::FetchLimits {
            max_bytes: (args.resume_fetch_max_gib.max(0.0) * (1u64 << 30) as f64) as u64,
            timeout: args.resume_fetch_timeout,
        },
        backoff_initial: BACKOFF_INITIAL,
        backoff_max: BACKOFF_MAX,
        teams: cohort_agent::teams::TeamPolicy::load(&args.team_flags())
            .map_err(anyhow::Error::msg)?,
        tls: ClientTls {
            ca: args.tls_ca.clone(),
            cert: args.tls_cert.clone(),
            key: args.tls_key.clone(),
            server_name: args.tls_server_name.clone(),
        },
    })
}

/// On SIGHUP the session reconnects, reading the TLS files afresh.
async fn reconnect_on_sighup(reload: std::sync::Arc<tokio::sync::Notify>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        tracing::warn!("no SIGHUP handler: TLS files are re-read only at reconnects");
        return;
    };
    while hangups.recv().await.is_some() {
        tracing::info!("SIGHUP: reconnecting with the TLS files as they are now");
        reload.notify_one();
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "no SIGTERM handler; only Ctrl-C stops the agent");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
