//! One module per command group; each function runs the RPCs of one command
//! and prints the result in the chosen format.

pub mod agents;
pub mod alerts;
pub mod alerts_list;
pub mod gpus;
pub mod history;
pub mod report;
pub mod telemetry;
pub mod train;
pub mod watch;

use std::future::Future;

/// Runs `fut` unless Ctrl-C comes first.
pub async fn interruptible<F: Future>(fut: F) -> Option<F::Output> {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        value = fut => Some(value),
        _ = ctrl_c => None,
    }
}
