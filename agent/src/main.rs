use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use tokio::sync::watch;
use tracing_subscriber::EnvFilter;

use cohort_agent::cli::Args;
use cohort_agent::probe;
use cohort_agent::telemetry;

fn init_logging(json: bool) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,h2=warn,tower=warn,hyper=warn,tonic=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    init_logging(args.log_json);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cohort-agent: could not start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cohort-agent: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let name = args.agent_name();

    let probe = probe::open(args.simulate_gpus.as_ref(), &name)?;
    let probe = telemetry::share(probe);
    let gpus = telemetry::inventory(&probe)
        .await
        .context("reading the gpu inventory")?;
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
    tracing::info!(
        agent = %name,
        coordinator = %args.coordinator,
        gpus = gpus.len(),
        work_dir = %args.work_dir().display(),
        "cohort-agent up"
    );

    let (stop_tx, stop_rx) = watch::channel(false);
    let telemetry = tokio::spawn(telemetry::log_loop(probe.clone(), args.interval, stop_rx));
    shutdown_signal().await;
    tracing::info!("shutting down");
    let _ = stop_tx.send(true);
    let _ = telemetry.await;
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
