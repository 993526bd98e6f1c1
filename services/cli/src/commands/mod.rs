//! One module per resource (`gpus`, `agents`, `train`, `checkpoints`,
//! `telemetry`, `alerts`): each owns its command-line arguments, runs the
//! RPCs of its commands and draws its tables; `-o json` is the generic
//! [`crate::render::json::message`]. `watch` and `report` are the larger
//! commands of `train`, in files of their own; `telemetry` and `alerts` are
//! folders (their flags, then one file per command).

pub mod admin;
pub mod agents;
pub mod alerts;
pub mod audit;
pub mod checkpoints;
pub mod code;
pub mod gpus;
pub mod logs;
pub mod maintenance;
pub mod report;
pub mod sweep;
pub mod telemetry;
pub mod tensorboard;
pub mod train;
pub mod watch;
pub mod webhook;

use std::future::Future;
use std::sync::OnceLock;
use tokio::sync::watch as flag;

/// Turns true at the first Ctrl-C. One listener for the whole process, set
/// up on first use: a Ctrl-C that arrives between two waits (while a line
/// is printed, say) is still seen by the next one.
static INTERRUPTED: OnceLock<flag::Receiver<bool>> = OnceLock::new();

fn interrupted() -> flag::Receiver<bool> {
    INTERRUPTED
        .get_or_init(|| {
            let (tx, rx) = flag::channel(false);
            tokio::spawn(async move {
                if tokio::signal::ctrl_c().await.is_ok() {
                    tx.send_replace(true);
                }
                // keep the sender: a closed channel must not read as Ctrl-C
                std::future::pending::<()>().await;
            });
            rx
        })
        .clone()
}

/// Runs `fut` unless Ctrl-C comes first (or came already).
pub async fn interruptible<F: Future>(fut: F) -> Option<F::Output> {
    let mut rx = interrupted();
    let ctrl_c = async move {
        if rx.wait_for(|hit| *hit).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        biased;
        _ = ctrl_c => None,
        value = fut => Some(value),
    }
}
