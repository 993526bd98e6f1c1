//! Waiting in tests: for a condition to become true, with a deadline
//! ([`eventually`]), or for one to stay true for a while ([`holds`]). Tests
//! poll; they never sleep a fixed time and hope.

use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// How often [`holds`] re-checks, and the longest [`eventually`] waits
/// between checks.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// [`eventually`]'s first wait between checks: a condition that comes true
/// at once costs milliseconds, one that takes seconds costs a check per
/// [`POLL_INTERVAL`].
const FIRST_INTERVAL: Duration = Duration::from_millis(10);

/// Calls `check` until it returns `Ok`, and returns that value (every 10 ms
/// at first, doubling up to [`POLL_INTERVAL`]); panics after `timeout` with
/// `what` and the last `Err` reason.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    let mut interval = FIRST_INTERVAL;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(reason) => {
                if Instant::now() >= deadline {
                    panic!("timed out after {timeout:?} waiting for {what}; last: {reason}");
                }
            }
        }
        tokio::time::sleep(interval).await;
        interval = (interval * 2).min(POLL_INTERVAL);
    }
}

/// Calls `check` every [`POLL_INTERVAL`] for `period` and panics, with
/// `what` and the reason, the first time it returns `Err`: what must not
/// happen (a waiting training that starts, an agent that comes back) is
/// watched for the whole period, and a failure shows at once.
pub async fn holds<F, Fut>(what: &str, period: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let deadline = Instant::now() + period;
    loop {
        if let Err(reason) = check().await {
            panic!("{what} stopped holding: {reason}");
        }
        if Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep(POLL_INTERVAL.min(deadline - Instant::now())).await;
    }
}

/// [`eventually`] for a test without a runtime: calls `check` on this
/// thread until it returns `Ok`; panics after `timeout`.
pub fn eventually_blocking<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = std::time::Instant::now() + timeout;
    let mut interval = FIRST_INTERVAL;
    loop {
        match check() {
            Ok(value) => return value,
            Err(reason) if std::time::Instant::now() >= deadline => {
                panic!("timed out after {timeout:?} waiting for {what}; last: {reason}")
            }
            Err(_) => {}
        }
        std::thread::sleep(interval);
        interval = (interval * 2).min(POLL_INTERVAL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn eventually_returns_the_first_success() {
        let calls = AtomicU32::new(0);
        let got = eventually("the third call", Duration::from_secs(5), || async {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            if n >= 3 {
                Ok(n)
            } else {
                Err(format!("call {n}"))
            }
        })
        .await;
        assert_eq!(got, 3);
    }

    #[tokio::test]
    #[should_panic(expected = "timed out after")]
    async fn eventually_panics_at_its_deadline() {
        eventually::<(), _, _>("never", Duration::from_millis(300), || async {
            Err("not yet".to_string())
        })
        .await;
    }

    #[test]
    fn eventually_blocking_returns_the_first_success() {
        let mut calls = 0;
        let got = eventually_blocking("the second call", Duration::from_secs(5), || {
            calls += 1;
            if calls >= 2 {
                Ok(calls)
            } else {
                Err("first".into())
            }
        });
        assert_eq!(got, 2);
    }

    #[tokio::test]
    async fn holds_watches_the_whole_period() {
        let calls = AtomicU32::new(0);
        let start = Instant::now();
        holds("always", Duration::from_millis(500), || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .await;
        assert!(start.elapsed() >= Duration::from_millis(500));
        assert!(calls.load(Ordering::SeqCst) >= 3);
    }

    #[tokio::test]
    #[should_panic(expected = "stopped holding: second call")]
    async fn holds_fails_at_the_first_break() {
        let calls = AtomicU32::new(0);
        holds("until the second call", Duration::from_secs(30), || async {
            match calls.fetch_add(1, Ordering::SeqCst) {
                0 => Ok(()),
                _ => Err("second call".to_string()),
            }
        })
        .await;
    }
}
