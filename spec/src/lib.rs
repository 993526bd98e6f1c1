//! Contracts shared by every cohort part, with no heavy dependencies so the
//! coordinator, the agent, the CLI and `cohort-rank` can all link it.
//!
//! - [`config`]: the training job config (TOML/JSON, the same keys the API carries),
//!   parsed strictly (unknown keys are errors) and validated once.
//! - [`progress`]: the JSON lines `cohort-rank` prints on stdout and the agent parses.
//! - [`doctor`]: the libtorch facts `cohort-rank doctor` reports to the agent's host doctor.
//! - [`elastic`]: the sizes an elastic training runs at, the global batch held at each.
//! - [`duration`]: durations on command lines (`500ms`, `10s`, `24h`).
//! - [`exit`]: the table of `cohort-rank` exit codes and how each is classified.
//! - [`roots`], [`prefixes`]: the local directories and object-storage prefixes a team's ranks may reach.
//! - [`envfile`]: the environment files that give ranks their variables (credentials per team).
//! - [`resume`]: which checkpoints a restarted attempt may resume from.
//! - [`location`]: where data and checkpoints live (path, `file://`, `s3://`), the one parser.
//! - [`checkpoint`]: a checkpoint's files, directories and typed manifest.
//! - [`launch`]: the environment every rank starts with (torchrun's, and cohort's).
//! - [`metrics`]: a program's looser progress lines.
//! - [`program`]: a team's own program as a training (`[program]`).
//! - [`code`]: the code a program training carries (`[program] code`).
//! - [`workload`]: what a training runs, the SAE or a program.
//! - [`schedule`]: what a training tells the scheduler (`preemption_grace`, `expected_duration`).

pub mod checkpoint;
pub mod code;
pub mod config;
pub mod doctor;
pub mod duration;
pub mod elastic;
pub mod envfile;
pub mod exit;
pub mod frontier;
pub mod launch;
pub mod location;
pub mod metrics;
pub mod prefixes;
pub mod program;
pub mod progress;
pub mod resume;
pub mod rng;
pub mod roots;
pub mod schedule;
pub mod sweep;
pub mod tracking;
pub mod workload;

pub use config::{ConfigError, TrainingConfig};
pub use exit::{ExitClass, ExitCode};
pub use program::ProgramTraining;
pub use workload::Workload;
