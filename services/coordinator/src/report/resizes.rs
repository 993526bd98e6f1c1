//! A report's resizes: every time an elastic training's gang re-formed at
//! another size (grow, shrink), from its `resized` events.

use crate::model::{EventPayload, StoredEvent};
use chrono::{DateTime, Utc};
use serde::Serialize;

/// One resize of the training.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResizeRow {
    pub time: DateTime<Utc>,
    /// The attempt at the new size.
    pub attempt: i32,
    pub from_world_size: i32,
    pub to_world_size: i32,
    /// The step it resumed from (none: from the start).
    pub step: Option<i64>,
    /// From the decision to the new gang sent to its agents.
    pub seconds: f64,
    /// "grow" or "shrink".
    pub reason: String,
}

/// Every resize and the seconds they took, summed.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Resizes {
    pub count: usize,
    pub seconds: f64,
    pub rows: Vec<ResizeRow>,
}

/// The resizes among `events`, oldest first.
pub fn resizes(events: &[StoredEvent]) -> Resizes {
    let rows: Vec<ResizeRow> = events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::Resized(r) => Some(ResizeRow {
                time: e.time,
                attempt: e.attempt,
                from_world_size: r.from_world_size,
                to_world_size: r.to_world_size,
                step: r.step,
                seconds: r.seconds,
                reason: r.why.clone(),
            }),
            _ => None,
        })
        .collect();
    Resizes {
        count: rows.len(),
        seconds: rows.iter().map(|r| r.seconds).sum(),
        rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Preempted, Resized};
    use crate::report::preemptions::tests::event;

    fn resized(from: i32, to: i32, step: Option<i64>, seconds: f64, why: &str) -> EventPayload {
        EventPayload::Resized(Resized {
            from_world_size: from,
            to_world_size: to,
            step,
            seconds,
            why: why.into(),
        })
    }

    #[test]
    fn only_resized_events_count_and_their_seconds_add_up() {
        let events = vec![
            event(1, 1, resized(2, 4, Some(400), 1.5, "grow")),
            event(
                2,
                1,
                EventPayload::Preempted(Preempted {
                    by: "u".into(),
                    kind: "preempt".into(),
                    priority_class: "urgent".into(),
                    resume_step: Some(500),
                    gpu_seconds_lost: 1.0,
                    checkpointed: true,
                }),
            ),
            event(3, 3, resized(4, 2, None, 0.25, "shrink")),
        ];
        let r = resizes(&events);
        assert_eq!(r.count, 2);
        assert_eq!(r.seconds, 1.75);
        assert_eq!(
            (
                r.rows[0].from_world_size,
                r.rows[0].to_world_size,
                r.rows[0].step
            ),
            (2, 4, Some(400))
        );
        assert_eq!(
            (r.rows[1].attempt, r.rows[1].reason.as_str()),
            (3, "shrink")
        );
        assert_eq!(resizes(&events[1..2]), Resizes::default());
    }
}
