//! Which coordinator leads. On SQLite a coordinator leads alone (the file
//! lock keeps a second one out); on PostgreSQL coordinators elect one
//! through a lease row ([`crate::persistence::lease`]) and the others stand
//! by, serving reads from the database and pointing changes at the leader.
//!
//! [`Leadership`] is the role as every part of the server sees it;
//! [`elector`] moves it; [`gate`] refuses changes on a standby;
//! [`crate::background::Leading`] starts the leader's work (scheduler,
//! runner, alerts, history) when the role becomes leader.

pub mod elector;
pub mod forward;
pub mod gate;

pub use elector::{Elector, LeaseSettings};

use std::sync::Arc;
use tokio::sync::watch;

/// This coordinator's part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// It leads, at this fencing epoch (0 when it leads alone, on SQLite).
    Leader { epoch: i64 },
    /// Another coordinator leads (its `--advertise` URL, when its lease is
    /// live), or none does yet.
    Standby { leader: Option<String> },
    /// It led, and another coordinator took the lease: it stops.
    Deposed { leader: Option<String> },
}

impl Role {
    /// The leader's URL to send a client to, when this one does not lead.
    pub fn leader_hint(&self) -> Option<&str> {
        match self {
            Role::Leader { .. } => None,
            Role::Standby { leader } | Role::Deposed { leader } => leader.as_deref(),
        }
    }
}

/// The role, shared. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Leadership {
    role: Arc<watch::Sender<Role>>,
    /// Whether the leader's work ([`Leading`]) has started: the scheduler,
    /// the adoption of placed trainings and the telemetry history writer.
    working: Arc<watch::Sender<bool>>,
    /// The live coordinators' `--advertise` URLs (the member set), sorted.
    members: Arc<watch::Sender<Vec<String>>>,
    /// The member set as the response header every call carries, encoded
    /// once per change rather than per call (`None`: no members, or not a
    /// valid header value).
    members_header: Arc<std::sync::RwLock<Option<http::HeaderValue>>>,
    elected: bool,
}

impl Default for Leadership {
    fn default() -> Self {
        Self::alone()
    }
}

impl Leadership {
    /// Leads from the start, alone (SQLite; tests).
    pub fn alone() -> Self {
        Self {
            role: Arc::new(watch::channel(Role::Leader { epoch: 0 }).0),
            working: Arc::new(watch::channel(false).0),
            members: Arc::new(watch::channel(Vec::new()).0),
            members_header: Arc::default(),
            elected: false,
        }
    }

    /// Stands by until an [`Elector`] wins the lease.
    pub fn elected() -> Self {
        Self {
            role: Arc::new(watch::channel(Role::Standby { leader: None }).0),
            working: Arc::new(watch::channel(false).0),
            members: Arc::new(watch::channel(Vec::new()).0),
            members_header: Arc::default(),
            elected: true,
        }
    }

    /// Whether an election decides (PostgreSQL), rather than leading alone.
    pub fn is_elected(&self) -> bool {
        self.elected
    }

    pub fn role(&self) -> Role {
        self.role.borrow().clone()
    }

    pub fn is_leader(&self) -> bool {
        matches!(*self.role.borrow(), Role::Leader { .. })
    }

    /// The fencing epoch this coordinator leads at (0 when it does not).
    pub fn epoch(&self) -> i64 {
        match *self.role.borrow() {
            Role::Leader { epoch } => epoch,
            _ => 0,
        }
    }

    pub fn subscribe(&self) -> watch::Receiver<Role> {
        self.role.subscribe()
    }

    /// Moves the role; watchers are told only of a change.
    pub(crate) fn set(&self, role: Role) {
        self.role.send_if_modified(|current| {
            let changed = *current != role;
            *current = role;
            changed
        });
    }

    /// The member set: every live coordinator's `--advertise` URL.
    pub fn members(&self) -> Vec<String> {
        self.members.borrow().clone()
    }

    /// Follows the member set; watchers are told only of a change.
    pub fn subscribe_members(&self) -> watch::Receiver<Vec<String>> {
        self.members.subscribe()
    }

    /// Moves the member set (the elector, from the database; a coordinator
    /// on SQLite sets its own URL once).
    pub fn set_members(&self, mut members: Vec<String>) {
        members.sort();
        members.dedup();
        self.members.send_if_modified(|current| {
            let changed = *current != members;
            if changed {
                let header = (!members.is_empty())
                    .then(|| http::HeaderValue::from_str(&members.join(",")).ok())
                    .flatten();
                *self
                    .members_header
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = header;
            }
            *current = members;
            changed
        });
    }

    /// The member set as a response header value (a cheap clone).
    pub fn members_header(&self) -> Option<http::HeaderValue> {
        self.members_header
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Marks the leader's work started (or stopped).
    pub(crate) fn set_working(&self, working: bool) {
        self.working
            .send_if_modified(|current| std::mem::replace(current, working) != working);
    }

    /// Waits up to `timeout` until this coordinator leads with its work
    /// started: an agent's session begins only then, so no telemetry
    /// reaches the fleet before the history writer listens and no agent is
    /// reset to disconnected after it registered. False on a timeout.
    pub async fn wait_working(&self, timeout: std::time::Duration) -> bool {
        let mut working = self.working.subscribe();
        let ready = async { working.wait_for(|w| *w).await.is_ok() };
        tokio::time::timeout(timeout, ready).await.unwrap_or(false) && self.is_leader()
    }

    /// Resolves once this coordinator has been deposed.
    pub async fn deposed(&self) {
        let mut rx = self.role.subscribe();
        if rx
            .wait_for(|r| matches!(r, Role::Deposed { .. }))
            .await
            .is_err()
        {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_members_header_follows_the_member_set() {
        let l = Leadership::alone();
        assert_eq!(l.members_header(), None);
        l.set_members(vec![
            "http://b:1".into(),
            "http://a:1".into(),
            "http://a:1".into(),
        ]);
        assert_eq!(
            l.members_header().unwrap().to_str().unwrap(),
            "http://a:1,http://b:1"
        );
        l.set_members(Vec::new());
        assert_eq!(l.members_header(), None);
        l.set_members(vec!["bad\nvalue".into()]);
        assert_eq!(l.members_header(), None, "not a header value: left out");
    }
}
