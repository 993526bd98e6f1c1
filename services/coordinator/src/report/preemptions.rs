//! A report's preemptions: every notice that stopped the training (a
//! preempting class, a reclaim of a borrowed guarantee, a drain), from its
//! `preempted` events, and the work they cost.

use crate::model::{EventPayload, StoredEvent};
use chrono::{DateTime, Utc};
use serde::Serialize;

/// One preemption of the training.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PreemptionRow {
    pub time: DateTime<Utc>,
    /// The attempt it stopped.
    pub attempt: i32,
    /// The training it made room for (a drained agent's name for a drain).
    pub by: String,
    /// "preempt", "reclaim", "drain" or "pause" (by its sweep, at a rung).
    pub kind: String,
    pub priority_class: String,
    /// The step the next attempt resumed from (none: from the start).
    pub resume_step: Option<i64>,
    pub gpu_seconds_lost: f64,
    /// A checkpoint was written during the notice's grace.
    pub checkpointed: bool,
}

/// Every preemption and their total cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Preemptions {
    pub count: usize,
    pub gpu_seconds_lost: f64,
    pub rows: Vec<PreemptionRow>,
}

/// The preemptions among `events`, oldest first.
pub fn preemptions(events: &[StoredEvent]) -> Preemptions {
    let rows: Vec<PreemptionRow> = events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::Preempted(p) => Some(PreemptionRow {
                time: e.time,
                attempt: e.attempt,
                by: p.by.clone(),
                kind: p.kind.clone(),
                priority_class: p.priority_class.clone(),
                resume_step: p.resume_step,
                gpu_seconds_lost: p.gpu_seconds_lost,
                checkpointed: p.checkpointed,
            }),
            _ => None,
        })
        .collect();
    Preemptions {
        count: rows.len(),
        gpu_seconds_lost: rows.iter().map(|r| r.gpu_seconds_lost).sum(),
        rows,
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::model::{JobState, Preempted, StateChange};

    /// A stored event of training `t` (the resizes' tests use it too).
    pub(in crate::report) fn event(seq: i64, attempt: i32, payload: EventPayload) -> StoredEvent {
        StoredEvent {
            training_id: "t".into(),
            seq,
            attempt,
            payload,
            time: Utc::now(),
        }
    }

    #[test]
    fn only_preempted_events_count_and_their_losses_add_up() {
        let preempted = |by: &str, lost: f64, step: Option<i64>| {
            EventPayload::Preempted(Preempted {
                by: by.into(),
                kind: "preempt".into(),
                priority_class: "urgent".into(),
                resume_step: step,
                gpu_seconds_lost: lost,
                checkpointed: step.is_some(),
            })
        };
        let events = vec![
            event(
                1,
                0,
                EventPayload::StateChange(StateChange {
                    from: None,
                    to: JobState::Queued,
                    reason: "created".into(),
                }),
            ),
            event(2, 1, preempted("u1", 0.5, Some(120))),
            event(3, 2, preempted("u2", 12.0, None)),
        ];
        let p = preemptions(&events);
        assert_eq!(p.count, 2);
        assert_eq!(p.gpu_seconds_lost, 12.5);
        assert_eq!(p.rows[0].by, "u1");
        assert_eq!(p.rows[0].resume_step, Some(120));
        assert_eq!(p.rows[1].attempt, 2);
        assert!(!p.rows[1].checkpointed);
        assert_eq!(preemptions(&events[..1]), Preemptions::default());
    }
}
