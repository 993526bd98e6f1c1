//! Following the state transitions as they are recorded, from where they
//! stood when this coordinator became leader: what webhooks and trackers
//! announce. `state_transitions`' increasing id is the cursor.

use crate::persistence::Persistence;
use std::time::Duration;

/// The newest transition's id now, asked again every `retry` while the
/// database does not answer; `None` when `shutdown` came first.
pub async fn start_cursor<F>(
    db: &Persistence,
    who: &'static str,
    retry: Duration,
    shutdown: std::pin::Pin<&mut F>,
) -> Option<i64>
where
    F: std::future::Future<Output = ()>,
{
    let mut shutdown = shutdown;
    loop {
        match db.last_transition_id().await {
            Ok(id) => return Some(id),
            Err(e) => {
                tracing::warn!(follower = who, error = %e, "cannot read where the state transitions stand; trying again");
                tokio::select! {
                    _ = &mut shutdown => return None,
                    _ = tokio::time::sleep(retry) => {}
                }
            }
        }
    }
}
