//! Rank events waiting for a session: kept while the coordinator is away so
//! that no start or exit is lost; progress lines are dropped first when full.

use std::collections::VecDeque;

use cohort_proto::v1;

/// Events kept while disconnected.
pub const OUTBOX_CAPACITY: usize = 10_000;

#[derive(Debug, Default)]
pub struct Outbox {
    events: VecDeque<v1::RankEvent>,
    dropped: u64,
}

impl Outbox {
    pub fn push(&mut self, event: v1::RankEvent) {
        if self.events.len() >= OUTBOX_CAPACITY {
            let victim = self.events.iter().position(is_progress).unwrap_or(0);
            self.events.remove(victim);
            self.dropped += 1;
            if self.dropped.is_power_of_two() {
                tracing::warn!(
                    dropped = self.dropped,
                    "rank event outbox full: dropping old events"
                );
            }
        }
        self.events.push_back(event);
    }

    /// Takes every waiting event, oldest first.
    pub fn take(&mut self) -> Vec<v1::RankEvent> {
        self.events.drain(..).collect()
    }

    /// Puts events back in front (a session broke before they were sent).
    pub fn restore(&mut self, events: Vec<v1::RankEvent>) {
        for event in events.into_iter().rev() {
            self.events.push_front(event);
        }
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}

fn is_progress(e: &v1::RankEvent) -> bool {
    matches!(e.kind, Some(v1::rank_event::Kind::Progress(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(rank: i32, progress: bool) -> v1::RankEvent {
        let kind = if progress {
            v1::rank_event::Kind::Progress(v1::RankProgress::default())
        } else {
            v1::rank_event::Kind::Started(v1::RankStarted { pid: 1 })
        };
        v1::RankEvent {
            rank,
            kind: Some(kind),
            ..Default::default()
        }
    }

    #[test]
    fn full_outbox_drops_progress_before_lifecycle_events() {
        let mut outbox = Outbox::default();
        outbox.push(event(-1, false));
        for i in 0..OUTBOX_CAPACITY as i32 {
            outbox.push(event(i, true));
        }
        assert_eq!(outbox.len(), OUTBOX_CAPACITY);
        let events = outbox.take();
        assert_eq!(events[0].rank, -1, "the start survived");
        assert_eq!(events[1].rank, 1, "the oldest progress went");
        assert!(outbox.is_empty());
        outbox.restore(vec![event(7, false), event(8, false)]);
        outbox.push(event(9, false));
        let ranks: Vec<i32> = outbox.take().iter().map(|e| e.rank).collect();
        assert_eq!(ranks, vec![7, 8, 9]);
    }
}
