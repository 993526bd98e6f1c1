//! The create worker's memory of each team's QUEUED count between batches.
//!
//! A capped create must know how many QUEUED trainings its team has. Counting
//! them in every batch scanned the whole queue (20,000 index entries and
//! their rows at 20,000 queued: most of a batch's time on PostgreSQL, and the
//! tail of CreateTraining under load). The worker keeps the counts its last
//! batch ended with, valid while no other transaction has changed a
//! training's state since (the event bell's state epoch moved only by that
//! batch's own commit); otherwise the next batch counts again.
//!
//! The epoch moves just after a commit, so a state change committed in the
//! instant before a batch begins, and rung after that batch read the epoch,
//! is missed by that one batch: a requeue at that moment can take its team
//! that many trainings over the cap, once. Creates never over-count.

use std::collections::HashMap;

/// Teams remembered at most (team names come from tokens; this bounds the
/// map all the same).
const MAX_TEAMS: usize = 4096;

/// Each team's QUEUED count as of `epoch`.
#[derive(Debug, Default)]
pub(super) struct QueueCounts {
    epoch: Option<u64>,
    counts: HashMap<String, i64>,
}

impl QueueCounts {
    /// The counts still true when the state epoch is `epoch`.
    pub(super) fn known(&self, epoch: u64) -> HashMap<String, i64> {
        if self.epoch == Some(epoch) {
            self.counts.clone()
        } else {
            HashMap::new()
        }
    }

    /// After a committed batch that began at epoch `before` with `known`,
    /// counted (or carried) `counted`, rang the epoch once if it `created`
    /// any training, and finds the epoch at `after` now.
    pub(super) fn after_batch(
        &mut self,
        before: u64,
        known: HashMap<String, i64>,
        counted: HashMap<String, i64>,
        created: bool,
        after: u64,
    ) {
        if after != before + u64::from(created) {
            // Someone else changed a state meanwhile: count again next time.
            self.epoch = None;
            self.counts.clear();
            return;
        }
        self.counts = known;
        self.counts.extend(counted);
        if self.counts.len() > MAX_TEAMS {
            self.counts.clear();
        }
        self.epoch = Some(after);
    }

    /// Forgets everything (a batch that failed).
    pub(super) fn forget(&mut self) {
        self.epoch = None;
        self.counts.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, i64)]) -> HashMap<String, i64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn counts_last_while_only_our_batches_change_states() {
        let mut q = QueueCounts::default();
        assert!(q.known(0).is_empty());
        q.after_batch(0, HashMap::new(), map(&[("a", 5)]), true, 1);
        assert_eq!(q.known(1), map(&[("a", 5)]));
        // A batch that only replayed or refused rang nothing.
        q.after_batch(1, q.known(1), map(&[("b", 2)]), false, 1);
        assert_eq!(q.known(1), map(&[("a", 5), ("b", 2)]));
        // Another transaction changed a state: stale.
        assert!(q.known(2).is_empty());
        q.after_batch(1, q.known(1), map(&[("a", 6)]), true, 3);
        assert!(q.known(3).is_empty());
        q.forget();
        assert!(q.known(3).is_empty());
    }
}
