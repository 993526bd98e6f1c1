//! Queue positions, kept between reads. Describing a waiting training
//! (GetTraining, ListTrainings) needs its place in the scheduling order,
//! which takes reading and ordering the whole queue; doing that per call
//! made reads O(queue) (92 ms at 1,600 queued). The order is kept instead
//! and read again only when a training's state changed since (a committed
//! state change moves the database's state epoch: a create, a placement, a
//! cancel, a restart) or when it is older than [`MAX_AGE`] (priorities age
//! with time). After a state change, concurrent readers wait for one
//! refresh; an order that is only old is still served while one refresh
//! runs behind it (aging moves positions slowly), so no reader pays for it.

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
    /// A refresh of an old order runs behind the readers.
    refreshing: Arc<std::sync::atomic::AtomicBool>,
}

impl PositionCache {
    /// The kept order if it is current at `epoch`; the kept order, with a
    /// refresh started behind it, if it is only old; else the one `read`
    /// returns (kept for the next caller), one reader refreshing while the
    /// others wait.
    pub async fn get_or_refresh<E, F, Fut>(
        &self,
        epoch: u64,
        read: F,
    ) -> Result<Arc<QueuePositions>, E>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<QueuePositions, E>> + Send + 'static,
        E: std::fmt::Display + Send + 'static,
    {
        use std::sync::atomic::Ordering;
        let mut kept = self.kept.lock().await;
        if let Some(positions) = kept.as_ref() {
            if positions.current(epoch) {
                return Ok(positions.clone());
            }
            if positions.epoch == epoch {
                if !self.refreshing.swap(true, Ordering::AcqRel) {
                    let this = self.clone();
                    tokio::spawn(async move {
                        match read().await {
                            Ok(fresh) => this.keep(Arc::new(fresh)).await,
                            Err(e) => tracing::warn!(error = %e, "cannot refresh queue positions"),
                        }
                        this.refreshing.store(false, Ordering::Release);
                    });
                }
                return Ok(positions.clone());
            }
        }
        let fresh = Arc::new(read().await?);
        *kept = Some(fresh.clone());
        Ok(fresh)
    }

    /// Keeps `fresh` unless a newer state's order is kept already.
    async fn keep(&self, fresh: Arc<QueuePositions>) {
        let mut kept = self.kept.lock().await;
        if kept.as_ref().is_none_or(|k| k.epoch <= fresh.epoch) {
            *kept = Some(fresh);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_order_is_read_again_only_after_a_state_change_or_a_second() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let cache = PositionCache::default();
        let reads = Arc::new(AtomicUsize::new(0));
        let read = |ids: &'static [&'static str], epoch| {
            let reads = reads.clone();
            move || async move {
                reads.fetch_add(1, Ordering::Relaxed);
                Ok::<_, String>(QueuePositions::new(epoch, ids.iter().copied()))
            }
        };
        let p = cache.get_or_refresh(7, read(&["a", "b"], 7)).await.unwrap();
        assert_eq!(
            (p.get("a"), p.get("b"), p.get("c")),
            (Some(1), Some(2), None)
        );
        // Same epoch: kept.
        let p = cache.get_or_refresh(7, read(&["x"], 7)).await.unwrap();
        assert_eq!(p.get("b"), Some(2));
        assert_eq!(reads.load(Ordering::Relaxed), 1);
        // A state change: read again, at once.
        let p = cache.get_or_refresh(8, read(&["b"], 8)).await.unwrap();
        assert_eq!((p.get("a"), p.get("b")), (None, Some(1)));
        assert_eq!(reads.load(Ordering::Relaxed), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn an_old_order_is_served_while_it_is_read_again() {
        let cache = PositionCache::default();
        cache
            .get_or_refresh(1, || async {
                Ok::<_, String>(QueuePositions::new(1, ["a"]))
            })
            .await
            .unwrap();
        tokio::time::advance(MAX_AGE).await;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let served = cache
            .get_or_refresh(1, move || async move {
                let _ = tx.send(());
                Ok::<_, String>(QueuePositions::new(1, ["b", "a"]))
            })
            .await
            .unwrap();
        assert_eq!(served.get("a"), Some(1), "the old order, at once");
        rx.await.expect("a refresh ran behind it");
        tokio::task::yield_now().await;
        let fresh = cache
            .get_or_refresh(1, || async {
                Err::<QueuePositions, _>("not read".to_string())
            })
            .await
            .unwrap();
        assert_eq!(fresh.get("a"), Some(2), "the refreshed order is kept");
    }
}
