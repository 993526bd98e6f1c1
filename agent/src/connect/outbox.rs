//! Rank events until the coordinator has stored them: waiting for a session
//! (the coordinator is away), and sent but not yet acknowledged. Every event
//! gets a delivery number; an `Ack` from the coordinator forgets those up to
//! its number, and when a session ends the unacknowledged ones go back in
//! front of the waiting ones, to be sent again in the next session (to
//! whichever coordinator leads then). Bounded: when full, the oldest
//! progress line is dropped first, never a start or an exit.

use std::collections::VecDeque;

use cohort_proto::v1;

/// Events kept (waiting and unacknowledged together).
pub const OUTBOX_CAPACITY: usize = 10_000;

#[derive(Debug)]
pub struct Outbox {
    /// Not sent in the current session, oldest first.
    waiting: VecDeque<v1::RankEvent>,
    /// Sent in the current session, not acknowledged, oldest first.
    unacked: VecDeque<v1::RankEvent>,
    next_delivery: u64,
    dropped: u64,
}

impl Default for Outbox {
    fn default() -> Self {
        Self {
            waiting: VecDeque::new(),
            unacked: VecDeque::new(),
            next_delivery: 1,
            dropped: 0,
        }
    }
}

impl Outbox {
    /// Gives `event` its delivery number (once).
    pub fn number(&mut self, mut event: v1::RankEvent) -> v1::RankEvent {
        if event.delivery == 0 {
            event.delivery = self.next_delivery;
            self.next_delivery += 1;
        }
        event
    }

    /// Keeps a numbered event until a session sends it.
    pub fn push(&mut self, event: v1::RankEvent) {
        self.make_room();
        self.waiting.push_back(event);
    }

    /// Notes that `event` went out in the current session.
    pub fn sent(&mut self, event: v1::RankEvent) {
        self.make_room();
        self.unacked.push_back(event);
    }

    /// The coordinator stored everything through `through`.
    pub fn ack(&mut self, through: u64) {
        while self.unacked.front().is_some_and(|e| e.delivery <= through) {
            self.unacked.pop_front();
        }
    }

    /// The session ended: what it did not get acknowledged is sent again,
    /// before anything newer.
    pub fn session_ended(&mut self) {
        while let Some(event) = self.unacked.pop_back() {
            self.waiting.push_front(event);
        }
    }

    /// Takes every waiting event, oldest first.
    pub fn take(&mut self) -> Vec<v1::RankEvent> {
        self.waiting.drain(..).collect()
    }

    /// Puts events back in front (a session broke before they were sent).
    pub fn restore(&mut self, events: Vec<v1::RankEvent>) {
        for event in events.into_iter().rev() {
            self.waiting.push_front(event);
        }
    }

    /// Events waiting to be sent.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Events sent and not acknowledged yet.
    pub fn unacked(&self) -> usize {
        self.unacked.len()
    }

    /// Drops the oldest progress line (else the oldest event) when full.
    fn make_room(&mut self) {
        if self.waiting.len() + self.unacked.len() < OUTBOX_CAPACITY {
            return;
        }
        // The unacknowledged are older than the waiting: look there first.
        let from_unacked = self.unacked.iter().position(is_progress);
        match from_unacked {
            Some(i) => {
                self.unacked.remove(i);
            }
            None => {
                let victim = self.waiting.iter().position(is_progress).unwrap_or(0);
                if self.waiting.remove(victim).is_none() {
                    self.unacked.pop_front();
                }
            }
        }
        self.dropped += 1;
        if self.dropped.is_power_of_two() {
            tracing::warn!(
                dropped = self.dropped,
                "rank event outbox full: dropping old events"
            );
        }
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

    #[test]
    fn what_a_session_did_not_get_acknowledged_is_sent_again_first() {
        let mut outbox = Outbox::default();
        let numbered: Vec<v1::RankEvent> = (0..5).map(|r| outbox.number(event(r, true))).collect();
        assert_eq!(
            numbered.iter().map(|e| e.delivery).collect::<Vec<_>>(),
            vec![1, 2, 3, 4, 5]
        );
        let again = outbox.number(numbered[0].clone());
        assert_eq!(again.delivery, 1, "numbered once");
        for e in &numbered[..4] {
            outbox.sent(e.clone());
        }
        outbox.push(numbered[4].clone());
        outbox.ack(2);
        assert_eq!(outbox.unacked(), 2);
        outbox.session_ended();
        let order: Vec<u64> = outbox.take().iter().map(|e| e.delivery).collect();
        assert_eq!(order, vec![3, 4, 5], "unacknowledged first, then waiting");
        assert_eq!(outbox.unacked(), 0);
    }
}
