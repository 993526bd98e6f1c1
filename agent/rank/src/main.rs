//! `cohort-rank --config FILE --run-dir DIR`, with RANK, WORLD_SIZE, LOCAL_RANK,
//! LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT in the environment. Exits with
//! one of the codes of `cohort_spec::exit` (see docs/rank.md).
//! `cohort-rank doctor local|all-reduce` checks the host instead (the agent's
//! `cohort-agent doctor` runs it).

use clap::Parser;
use cohort_rank::launch::Launch;
use cohort_rank::train::Trainer;
use cohort_rank::RankError;
use cohort_spec::{ExitCode, TrainingConfig};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "cohort-rank",
    version,
    about = "One data-parallel rank of a cohort training job",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// The training config, TOML (or JSON when the file ends in .json).
    #[arg(
        long,
        conflicts_with = "config_json",
        required_unless_present = "config_json"
    )]
    config: Option<PathBuf>,
    /// The training config as a JSON string (what the agent passes).
    #[arg(long)]
    config_json: Option<String>,
    /// Directory for checkpoints and reports; created if missing.
    #[arg(long, required = true)]
    run_dir: Option<PathBuf>,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Check this host for the agent's doctor; prints one JSON object.
    #[command(subcommand)]
    Doctor(cohort_rank::doctor::DoctorMode),
}

fn run(args: Args) -> Result<(), RankError> {
    if let Some(Command::Doctor(mode)) = &args.command {
        return cohort_rank::doctor::run(mode);
    }
    let run_dir = args.run_dir.clone().expect("clap requires --run-dir");
    let config = match (&args.config, &args.config_json) {
        (Some(path), _) => TrainingConfig::from_file(path)?,
        (None, Some(json)) => TrainingConfig::from_json(json)?,
        (None, None) => unreachable!("clap requires one"),
    };
    let launch = Launch::from_env()?;
    std::fs::create_dir_all(&run_dir)
        .map_err(|e| RankError::Checkpoint(format!("create run dir {}: {e}", run_dir.display())))?;
    tch::set_num_threads(launch.torch_threads());
    tch::set_num_interop_threads(1);
    Trainer::new(&launch, &config, &run_dir)?.run()
}

/// Run, turning a libtorch panic into a classified error.
fn guarded(args: Args) -> Result<(), RankError> {
    std::panic::set_hook(Box::new(|_| {}));
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(args))) {
        Ok(result) => result,
        Err(payload) => {
            let text = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            Err(RankError::from_torch(text))
        }
    }
}

/// With COHORT_EXIT_WITH_PARENT=1 (the agent sets it), exit as soon as the
/// process that started us is gone: a rank never outlives its agent. The
/// agent also has the kernel SIGKILL us when it dies (a parent-death
/// signal); this watchdog is the second line, for a rank started otherwise.
/// Nothing here may panic: the agent's end of our stderr is closed by then,
/// so `eprintln!` would panic this thread (EPIPE) and the rank would live on.
fn exit_with_parent() {
    if std::env::var("COHORT_EXIT_WITH_PARENT").as_deref() != Ok("1") {
        return;
    }
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() };
    let spawned = std::thread::Builder::new()
        .name("parent-watch".into())
        .spawn(move || loop {
            std::thread::sleep(std::time::Duration::from_millis(200));
            // SAFETY: as above.
            if unsafe { libc::getppid() } != parent {
                let note = format!("cohort-rank: the agent (pid {parent}) is gone: exiting\n");
                // SAFETY: a write of a live buffer to fd 2; its result (EPIPE
                // once the agent is gone) is ignored on purpose. _exit ends
                // the process without running atexit handlers, which a
                // libtorch still at work could block.
                unsafe {
                    libc::write(2, note.as_ptr().cast(), note.len());
                    libc::_exit(ExitCode::Terminated.code());
                }
            }
        });
    if spawned.is_err() {
        // The parent-death signal still covers us.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"cohort-rank: cannot start the parent watchdog\n",
        );
    }
}

fn main() {
    let args = Args::parse();
    if let Err(e) = cohort_rank::preempt::install() {
        eprintln!("cohort-rank: cannot hear preemption notices (SIGUSR1): {e}");
    }
    cohort_rank::preempt::catch_up();
    exit_with_parent();
    let code = match guarded(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("cohort-rank: error: {e}");
            e.exit_code().code()
        }
    };
    std::process::exit(code);
}
