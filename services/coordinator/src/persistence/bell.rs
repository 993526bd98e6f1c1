//! Tells WatchTraining streams that a training has new events, once the
//! transaction that wrote them has committed (so a woken watcher's query
//! sees them). A transaction that may append events gets an [`Outbox`]
//! beside its connection ([`Persistence::transaction_noting`](super::Persistence::transaction_noting));
//! [`append_event_in`](super::events::append_event_in) and the state
//! changes write to it, and the outbox is rung after the commit, or dropped
//! with a rollback.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// What one transaction's writes wake once it has committed: the watchers
/// of the trainings whose events it appended, and readers of the queue when
/// it changed a training's state. Written with the transaction; read only
/// after its commit.
#[derive(Debug, Default)]
pub struct Outbox {
    events: Vec<(String, i64)>,
    state_changed: bool,
}

impl Outbox {
    /// Event `seq` of `training_id` was appended.
    pub(super) fn event(&mut self, training_id: &str, seq: i64) {
        self.events.push((training_id.to_string(), seq));
    }

    /// A training's state changed.
    pub(super) fn state_change(&mut self) {
        self.state_changed = true;
    }
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

    /// Rings for what a committed transaction wrote.
    pub(super) fn deliver(&self, outbox: Outbox) {
        self.ring(outbox.events);
        if outbox.state_changed {
            self.ring_state_change();
        }
    }

    /// Rings for committed events; forgets trainings nobody watches any more.
    fn ring(&self, written: Vec<(String, i64)>) {
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
    fn ring_state_change(&self) {
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
    fn an_outbox_rings_its_events_and_counts_its_state_change() {
        let bell = EventBell::default();
        let mut rx = bell.subscribe("trn-a");
        let mut outbox = Outbox::default();
        outbox.event("trn-a", 7);
        bell.deliver(Outbox::default());
        assert!(!rx.has_changed().unwrap(), "an empty outbox rings nothing");
        assert_eq!(bell.state_epoch(), 0);
        outbox.state_change();
        bell.deliver(outbox);
        assert_eq!(*rx.borrow_and_update(), 7);
        assert_eq!(bell.state_epoch(), 1);
    }
}
