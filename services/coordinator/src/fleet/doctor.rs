//! Host doctors in flight: RunDoctor sends the agent a RunDoctorCommand and
//! waits for the DoctorResult of the same request id from the same agent.
//! One doctor per agent at a time, a bounded number in all; an answer from
//! another agent, or to a request nobody waits for, is dropped.

use crate::model::DoctorReport;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Doctors in flight across all agents.
pub const MAX_DOCTORS: usize = 64;

/// What an agent answered: its report, or why it made none.
pub type DoctorAnswer = Result<DoctorReport, String>;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DoctorBusy {
    #[error("a doctor already runs on agent {0}")]
    Agent(String),
    #[error("{MAX_DOCTORS} doctors already run")]
    Full,
}

/// The agent asked, and where its answer goes.
type Waiter = (String, oneshot::Sender<DoctorAnswer>);

#[derive(Clone, Default)]
pub struct Doctors {
    next: Arc<AtomicU64>,
    pending: Arc<Mutex<HashMap<u64, Waiter>>>,
}

impl Doctors {
    /// Registers a doctor on `agent_id`; its request id and where the answer comes.
    pub fn start(
        &self,
        agent_id: &str,
    ) -> Result<(u64, oneshot::Receiver<DoctorAnswer>), DoctorBusy> {
        let mut pending = self.pending.lock().expect("doctors lock");
        if pending.values().any(|(a, _)| a == agent_id) {
            return Err(DoctorBusy::Agent(agent_id.to_string()));
        }
        if pending.len() >= MAX_DOCTORS {
            return Err(DoctorBusy::Full);
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = oneshot::channel();
        pending.insert(id, (agent_id.to_string(), tx));
        Ok((id, rx))
    }

    /// Forgets a doctor (answered, timed out, or never sent).
    pub fn forget(&self, id: u64) {
        self.pending.lock().expect("doctors lock").remove(&id);
    }

    /// An agent's DoctorResult: handed to its waiter when it is that agent's.
    pub fn complete(&self, agent_id: &str, request_id: u64, answer: DoctorAnswer) {
        let mut pending = self.pending.lock().expect("doctors lock");
        match pending.get(&request_id) {
            Some((owner, _)) if owner == agent_id => {
                let (_, tx) = pending.remove(&request_id).expect("present");
                let _ = tx.send(answer);
            }
            _ => tracing::warn!(
                agent_id,
                request_id,
                "dropping a doctor report nobody asked this agent for"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_doctor_per_agent_and_answers_only_from_it() {
        let doctors = Doctors::default();
        let (id, mut rx) = doctors.start("a1").unwrap();
        assert_eq!(
            doctors.start("a1").unwrap_err(),
            DoctorBusy::Agent("a1".into())
        );
        doctors.complete("a2", id, Err("no".into()));
        assert!(rx.try_recv().is_err(), "another agent cannot answer");
        doctors.complete("a1", id, Err("could not".into()));
        assert_eq!(rx.try_recv().unwrap(), Err("could not".into()));
        assert!(
            doctors.start("a1").is_ok(),
            "answered: the agent may run another"
        );
        for i in 0..MAX_DOCTORS - 1 {
            doctors.start(&format!("b{i}")).unwrap();
        }
        assert_eq!(doctors.start("c").unwrap_err(), DoctorBusy::Full);
    }
}
