//! Queue positions, kept between reads. Describing a waiting training
//! (GetTraining, ListTrainings) needs its place in the scheduling order,
//! which takes reading and ordering the whole queue; doing that per call
//! made reads O(queue) (92 ms at 1,600 queued). The order is kept instead
//! and read again only when a training's state changed since (a committed
//! state change moves the database's state epoch: a create, a placement, a
//! cancel, a restart) or when it is older than [`MAX_AGE`] (priorities age
//! with time). Concurrent readers of a stale order wait for one refresh.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The longest a kept order is used, changes or not.
pub const MAX_AGE: Duration = Duration::from_secs(1);

/// 1-based positions of the waiting trainings, as of one read of the queue.
#[derive(Debug)]
pub struct QueuePositions {
    epoch: u64,
    read_at: Instant,
    by_id: HashMap<String, i32>,
}

impl QueuePositions {
    /// From the waiting trainings' ids in scheduling order, read when the
    /// state epoch was `epoch`.
    pub fn new<'a>(epoch: u64, ids: impl IntoIterator<Item = &'a str>) -> Self {
        let by_id = ids
            .into_iter()
            .zip(1..)
            .map(|(id, position)| (id.to_string(), position))
            .collect();
        Self {
            epoch,
            read_at: Instant::now(),
            by_id,
        }
    }

    /// The training's position; `None` when it was not waiting.
    pub fn get(&self, id: &str) -> Option<i32> {
        self.by_id.get(id).copied()
    }

    /// Whether this order still holds at state epoch `epoch`.
    pub fn current(&self, epoch: u64) -> bool {
        self.epoch == epoch && self.read_at.elapsed() < MAX_AGE
    }
}

/// The kept order, shared by every reader.
#[derive(Debug, Default, Clone)]
pub struct PositionCache {
    kept: Arc<tokio::sync::Mutex<Option<Arc<QueuePositions>>>>,
}

impl PositionCache {
    /// The kept order if it is current at `epoch`, else the one `read`
    /// returns (kept for the next caller). One reader refreshes; the others
    /// wait for it.
    pub async fn get_or_refresh<E, F, Fut>(
        &self,
        epoch: u64,
        read: F,
    ) -> Result<Arc<QueuePositions>, E>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<QueuePositions, E>>,
    {
        let mut kept = self.kept.lock().await;
        if let Some(positions) = kept.as_ref().filter(|p| p.current(epoch)) {
            return Ok(positions.clone());
        }
        let fresh = Arc::new(read().await?);
        *kept = Some(fresh.clone());
        Ok(fresh)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_order_is_read_again_only_after_a_state_change_or_a_second() {
        let cache = PositionCache::default();
        let reads = std::sync::atomic::AtomicUsize::new(0);
        let read = |ids: &'static [&'static str], epoch| {
            reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            async move { Ok::<_, ()>(QueuePositions::new(epoch, ids.iter().copied())) }
        };
        let p = cache
            .get_or_refresh(7, || read(&["a", "b"], 7))
            .await
            .unwrap();
        assert_eq!(
            (p.get("a"), p.get("b"), p.get("c")),
            (Some(1), Some(2), None)
        );
        // Same epoch: kept.
        let p = cache.get_or_refresh(7, || read(&["x"], 7)).await.unwrap();
        assert_eq!(p.get("b"), Some(2));
        assert_eq!(reads.load(std::sync::atomic::Ordering::Relaxed), 1);
        // A state change: read again.
        let p = cache.get_or_refresh(8, || read(&["b"], 8)).await.unwrap();
        assert_eq!((p.get("a"), p.get("b")), (None, Some(1)));
        assert_eq!(reads.load(std::sync::atomic::Ordering::Relaxed), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn an_old_order_is_read_again() {
        let cache = PositionCache::default();
        let read = || async { Ok::<_, ()>(QueuePositions::new(1, ["a"])) };
        cache.get_or_refresh(1, read).await.unwrap();
        tokio::time::advance(MAX_AGE).await;
        let mut again = false;
        cache
            .get_or_refresh(1, || {
                again = true;
                read()
            })
            .await
            .unwrap();
        assert!(again);
    }
}
