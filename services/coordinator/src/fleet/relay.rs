//! Reading files on an agent's host through its Connect stream: the
//! coordinator sends ReadFile and waits for the FileData with the same
//! request id from the same agent. Requests in flight are bounded; an
//! answer from another agent, or to a request nobody waits for, is dropped
//! and counted.

use super::FileChunk;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// Reads in flight across all agents.
pub const MAX_PENDING: usize = 64;
/// Reads in flight from one agent: downloads from one host cannot take
/// every slot, nor load that host's disk without bound.
pub const MAX_PENDING_PER_AGENT: usize = 8;
/// Reads in flight for one caller (a token, an agent, or anonymous callers
/// together): one caller's downloads cannot take every slot either.
pub const MAX_PENDING_PER_CALLER: usize = 16;
/// How long one read may take.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes one read asks for at most.
pub const MAX_READ: u32 = 1 << 20;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RelayError {
    #[error("agent {0} is not connected")]
    NotConnected(String),
    #[error("too many file reads in flight")]
    Busy,
    #[error("agent {0} did not answer within {1:?}")]
    Timeout(String, Duration),
    #[error("agent {agent}: {reason}")]
    Refused { agent: String, reason: String },
}

/// The agent asked, the caller the read is for, and where the answer goes.
type Waiter = (String, String, oneshot::Sender<FileChunk>);

#[derive(Clone, Default)]
pub struct Relay {
    next: Arc<AtomicU64>,
    pending: Arc<Mutex<HashMap<u64, Waiter>>>,
    /// Answers dropped: from the wrong agent, or to nobody.
    pub stray: Arc<AtomicU64>,
}

impl Relay {
    /// Registers a read from `agent_id` for `caller`; returns its request id
    /// and where the answer comes.
    pub fn start(
        &self,
        agent_id: &str,
        caller: &str,
    ) -> Result<(u64, oneshot::Receiver<FileChunk>), RelayError> {
        let mut pending = self.pending.lock().expect("relay lock");
        let from_agent = pending.values().filter(|(a, _, _)| a == agent_id).count();
        let for_caller = pending.values().filter(|(_, c, _)| c == caller).count();
        if pending.len() >= MAX_PENDING
            || from_agent >= MAX_PENDING_PER_AGENT
            || for_caller >= MAX_PENDING_PER_CALLER
        {
            return Err(RelayError::Busy);
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = oneshot::channel();
        pending.insert(id, (agent_id.to_string(), caller.to_string(), tx));
        Ok((id, rx))
    }

    /// Forgets a read (answered, timed out or never sent).
    pub fn forget(&self, id: u64) {
        self.pending.lock().expect("relay lock").remove(&id);
    }

    /// An agent's FileChunk: handed to its waiter when it is that agent's.
    pub fn complete(&self, agent_id: &str, data: FileChunk) {
        let mut pending = self.pending.lock().expect("relay lock");
        match pending.get(&data.request_id) {
            Some((owner, _, _)) if owner == agent_id => {
                let (_, _, tx) = pending.remove(&data.request_id).expect("present");
                let _ = tx.send(data);
            }
            _ => {
                drop(pending);
                self.stray.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    agent_id,
                    request_id = data.request_id,
                    "dropping a FileChunk nobody asked this agent for"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_reach_only_their_own_waiter() {
        let relay = Relay::default();
        let (id, mut rx) = relay.start("a1", "me").unwrap();
        let answer = |request_id| FileChunk {
            request_id,
            data: vec![1],
            ..Default::default()
        };
        relay.complete("a2", answer(id));
        assert!(rx.try_recv().is_err(), "another agent cannot answer");
        relay.complete("a1", answer(id + 100));
        assert_eq!(relay.stray.load(Ordering::Relaxed), 2);
        relay.complete("a1", answer(id));
        assert_eq!(rx.try_recv().unwrap().data, vec![1]);
        for i in 0..MAX_PENDING_PER_AGENT {
            relay.start("a1", &format!("c{i}")).unwrap();
        }
        assert_eq!(
            relay.start("a1", "c-new").unwrap_err(),
            RelayError::Busy,
            "one agent holds at most its share"
        );
        for agent in 0..MAX_PENDING_PER_CALLER {
            relay.start(&format!("b{agent}"), "greedy").unwrap();
        }
        assert_eq!(
            relay.start("b-new", "greedy").unwrap_err(),
            RelayError::Busy,
            "one caller holds at most its share, across agents"
        );
        let mut agent = 2;
        while relay
            .start(&format!("a{agent}"), &format!("c{agent}"))
            .is_ok()
        {
            agent += 1;
        }
        assert_eq!(
            relay.start("a-new", "c-new").unwrap_err(),
            RelayError::Busy,
            "and all agents together at most MAX_PENDING"
        );
    }
}
