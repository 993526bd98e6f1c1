//! Tells WatchTraining streams that a training has new events, once the
//! transaction that wrote them has committed (so a woken watcher's query
//! sees them). [`append_event_in`](super::events::append_event_in) notes
//! each event on its (blocking) thread; [`Persistence`](super::Persistence)
//! takes the notes after a commit and rings, or drops them on a rollback.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

thread_local! {
    /// Events written by the transaction running on this thread.
    static WRITTEN: RefCell<Vec<(String, i64)>> = const { RefCell::new(Vec::new()) };
    /// Whether that transaction changed a training's state.
    static STATE_CHANGED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Notes that the current transaction changed a training's state.
pub(super) fn note_state_change() {
    STATE_CHANGED.with(|c| c.set(true));
}

/// Whether the transaction that just committed changed a training's state.
pub(super) fn take_state_change() -> bool {
    STATE_CHANGED.with(|c| c.replace(false))
}

/// Notes that the current transaction wrote event `seq` of `training_id`.
pub(super) fn note(training_id: &str, seq: i64) {
    WRITTEN.with(|w| w.borrow_mut().push((training_id.to_string(), seq)));
}

/// The notes of the transaction that just committed.
pub(super) fn take() -> Vec<(String, i64)> {
    WRITTEN.with(|w| std::mem::take(&mut *w.borrow_mut()))
}

/// Forgets the notes (a rollback, or before a new transaction).
pub(super) fn discard() {
    WRITTEN.with(|w| w.borrow_mut().clear());
    STATE_CHANGED.with(|c| c.set(false));
}

/// One watch channel per training someone is watching, holding the newest
/// committed sequence number.
#[derive(Debug, Clone, Default)]
pub struct EventBell {
    trainings: Arc<Mutex<HashMap<String, watch::Sender<i64>>>>,
    /// Committed transactions that changed some training's state (created
    /// one, placed, finished, restarted ...): what was read of the queue
    /// before it changed is stale once this moves.
    state_epoch: Arc<std::sync::atomic::AtomicU64>,
}

impl EventBell {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, watch::Sender<i64>>> {
        self.trainings.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A receiver that changes when `training_id` gets new events.
    pub fn subscribe(&self, training_id: &str) -> watch::Receiver<i64> {
        self.lock()
            .entry(training_id.to_string())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// Rings for committed events; forgets trainings nobody watches any more.
    pub(super) fn ring(&self, written: Vec<(String, i64)>) {
        if written.is_empty() {
            return;
        }
        let mut trainings = self.lock();
        for (training_id, seq) in written {
            if let Some(tx) = trainings.get(&training_id) {
                if tx.receiver_count() == 0 {
                    trainings.remove(&training_id);
                } else {
                    tx.send_if_modified(|newest| {
                        let newer = seq > *newest;
                        *newest = (*newest).max(seq);
                        newer
                    });
                }
            }
        }
    }

    /// Counts a committed state change.
    pub(super) fn ring_state_change(&self) {
        self.state_epoch
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// How many committed transactions have changed a training's state.
    pub fn state_epoch(&self) -> u64 {
        self.state_epoch.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Trainings with a live subscription (for tests and diagnostics).
    pub fn watched(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_subscribers_with_the_newest_sequence_and_forgets_the_unwatched() {
        let bell = EventBell::default();
        let mut rx = bell.subscribe("trn-a");
        assert!(!rx.has_changed().unwrap());
        bell.ring(vec![
            ("trn-a".into(), 3),
            ("trn-b".into(), 9),
            ("trn-a".into(), 4),
        ]);
        assert!(rx.has_changed().unwrap());
        assert_eq!(*rx.borrow_and_update(), 4);
        // An older number changes nothing.
        bell.ring(vec![("trn-a".into(), 2)]);
        assert!(!rx.has_changed().unwrap());
        drop(rx);
        bell.ring(vec![("trn-a".into(), 5)]);
        assert_eq!(bell.watched(), 0);
    }

    #[test]
    fn notes_are_per_thread_and_taken_once() {
        discard();
        note("trn-a", 1);
        std::thread::spawn(|| {
            note("trn-b", 7);
        })
        .join()
        .unwrap();
        assert_eq!(take(), vec![("trn-a".to_string(), 1)]);
        assert!(take().is_empty());
        note("trn-a", 2);
        discard();
        assert!(take().is_empty());
    }
}
