//! The scheduling order of waiting trainings, and the rule that keeps a large
//! training from starving behind a stream of small ones.
//!
//! Order: effective priority (higher first), then age (older first). The
//! effective priority is the training's `priority` plus one for every
//! `aging` it has waited, so a waiting training eventually outranks any newer
//! one. Smaller trainings may be placed ahead of a training that doesn't fit
//! (backfill) — except once the head of the queue has waited longer than
//! `reserve_after`: then nothing behind it is placed until it fits, so the
//! GPUs it needs drain instead of being taken again.

use crate::model::Training;
use chrono::{DateTime, Utc};
use std::time::Duration;

/// What the order looks at: a whole training, or its key alone.
pub trait Waiting {
    fn id(&self) -> &str;
    fn priority(&self) -> i32;
    fn create_time(&self) -> DateTime<Utc>;
    /// RESTARTING (placed before every QUEUED one), else QUEUED.
    fn restarting(&self) -> bool;
}

/// Waiting by the fields of the same names (`id`, `priority`,
/// `create_time`, `state`).
macro_rules! waiting_by_fields {
    ($($t:ty),*) => {$(
        impl $crate::policy::order::Waiting for $t {
            fn id(&self) -> &str {
                &self.id
            }
            fn priority(&self) -> i32 {
                self.priority
            }
            fn create_time(&self) -> ::chrono::DateTime<::chrono::Utc> {
                self.create_time
            }
            fn restarting(&self) -> bool {
                self.state == $crate::model::JobState::Restarting
            }
        }
    )*};
}

pub(crate) use waiting_by_fields;

waiting_by_fields!(Training);

/// Restarting trainings go first, among themselves by priority (higher
/// first), then age, then id: no aging, they have waited once already.
pub fn order_restarting<T: Waiting>(trainings: &mut [T]) {
    trainings.sort_by(|a, b| {
        b.priority()
            .cmp(&a.priority())
            .then(a.create_time().cmp(&b.create_time()))
            .then(a.id().cmp(b.id()))
    });
}

#[derive(Debug, Clone)]
pub struct QueuePolicy {
    /// One priority step gained per this much waiting.
    pub aging: Duration,
    /// After this long at the head of the queue, no backfill past it.
    pub reserve_after: Duration,
}

impl Default for QueuePolicy {
    fn default() -> Self {
        Self {
            aging: Duration::from_secs(600),
            reserve_after: Duration::from_secs(1800),
        }
    }
}

impl QueuePolicy {
    pub fn effective_priority(&self, t: &impl Waiting, now: DateTime<Utc>) -> i64 {
        let waited = (now - t.create_time()).to_std().unwrap_or_default();
        let steps = waited.as_secs() / self.aging.as_secs().max(1);
        i64::from(t.priority()) + steps as i64
    }

    /// Waiting trainings (or their keys) in scheduling order: RESTARTING ones
    /// first (see [`order_restarting`]), then QUEUED ones (see [`Self::order`]).
    pub fn schedule<T: Waiting>(&self, waiting: Vec<T>, now: DateTime<Utc>) -> Vec<T> {
        let (mut all, mut queued): (Vec<T>, Vec<T>) =
            waiting.into_iter().partition(Waiting::restarting);
        order_restarting(&mut all);
        self.order(&mut queued, now);
        all.extend(queued);
        all
    }

    /// The positions of `waiting` in scheduling order (as
    /// [`Self::schedule`] orders them), without moving them.
    pub fn order_of<T: Waiting>(&self, waiting: &[T], now: DateTime<Utc>) -> Vec<usize> {
        // Restarting first by their own priority, then the queue by
        // effective priority; age, then id, break ties.
        let keys: Vec<(bool, i64, DateTime<Utc>)> = waiting
            .iter()
            .map(|w| {
                let priority = if w.restarting() {
                    i64::from(w.priority())
                } else {
                    self.effective_priority(w, now)
                };
                (!w.restarting(), -priority, w.create_time())
            })
            .collect();
        let mut order: Vec<usize> = (0..waiting.len()).collect();
        // Ids are unique: the order is total, so an unstable sort is the same.
        order.sort_unstable_by(|&a, &b| {
            keys[a]
                .cmp(&keys[b])
                .then_with(|| waiting[a].id().cmp(waiting[b].id()))
        });
        order
    }

    /// Sort waiting trainings (or their keys) into scheduling order.
    pub fn order<T: Waiting>(&self, trainings: &mut [T], now: DateTime<Utc>) {
        trainings.sort_by(|a, b| {
            self.effective_priority(b, now)
                .cmp(&self.effective_priority(a, now))
                .then(a.create_time().cmp(&b.create_time()))
                .then(a.id().cmp(b.id()))
        });
    }

    /// Whether `head` (which does not fit) now reserves the GPUs it waits for.
    pub fn reserves<T: Waiting>(&self, head: &T, now: DateTime<Utc>) -> bool {
        (now - head.create_time()).to_std().unwrap_or_default() >= self.reserve_after
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::GpuRequest;
    use crate::model::JobState;

    fn training(id: &str, priority: i32, age_min: i64, now: DateTime<Utc>) -> Training {
        let config = cohort_spec::TrainingConfig::from_toml(
            "[model]\nd_in = 4\n[optim]\nbatch_size = 1\nsteps = 1\n[data.synthetic]\nnum_samples = 4\n",
        )
        .unwrap();
        Training {
            id: id.into(),
            request_id: None,
            display_name: String::new(),
            config: config.into(),
            gpu_request: GpuRequest::default(),
            state: JobState::Queued,
            state_reason: String::new(),
            world_size: 0,
            distributed: false,
            priority,
            attempt: 0,
            restart_count: 0,
            max_restarts: 3,
            master_addr: None,
            master_port: None,
            last_event_seq: 0,
            create_time: now - chrono::Duration::minutes(age_min),
            update_time: now,
            start_time: None,
            end_time: None,
            trace_context: None,
            team: String::new(),
            creator: String::new(),
            labels: Default::default(),
            priority_class: String::new(),
            borrow: true,
            borrowing: false,
            preemption_count: 0,
            attempt_time: None,
            notice_saves: false,
            resize_count: 0,
        }
    }

    #[test]
    fn priority_first_then_age_and_waiting_raises_priority() {
        let now = Utc::now();
        let p = QueuePolicy::default();
        let mut q = vec![
            training("new-low", 0, 1, now),
            training("high", 5, 0, now),
            training("old-low", 0, 5, now),
        ];
        p.order(&mut q, now);
        let ids: Vec<&str> = q.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["high", "old-low", "new-low"]);
        // 60 minutes of waiting = +6: it now outranks a fresh priority-5 training
        let mut q = vec![
            training("fresh-high", 5, 0, now),
            training("starving", 0, 60, now),
        ];
        p.order(&mut q, now);
        assert_eq!(q[0].id, "starving");
    }

    #[test]
    fn the_head_reserves_after_the_limit() {
        let now = Utc::now();
        let p = QueuePolicy::default();
        assert!(!p.reserves(&training("a", 0, 10, now), now));
        assert!(p.reserves(&training("a", 0, 31, now), now));
    }
}
