//! Waiting for a condition with a deadline. Tests poll; they never sleep and hope.

use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// How often [`eventually`] re-checks.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// Calls `check` every [`POLL_INTERVAL`] until it returns `Ok`, and returns
/// that value; panics after `timeout` with `what` and the last `Err` reason.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(reason) => {
                if Instant::now() >= deadline {
                    panic!("timed out after {timeout:?} waiting for {what}; last: {reason}");
                }
            }
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}
