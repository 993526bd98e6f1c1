//! What a session keeps between an agent's messages, and what its
//! handlers ([`samples`](super::samples), [`rank_events`](super::rank_events))
//! answer the session with.

use crate::context::Context;
use std::collections::HashSet;

/// What a session keeps between messages.
pub(super) struct Session {
    pub ctx: Context,
    pub agent_id: String,
    /// Ranks known to be placed on this agent.
    pub owned: OwnedRanks,
    /// Whether a refusal was already logged at warn level (later ones go to debug).
    pub warned: bool,
}

impl Session {
    /// Logs a refused message: the first of the session as a warning.
    pub fn refused(&mut self, what: &str, detail: &str) {
        if std::mem::replace(&mut self.warned, true) {
            tracing::debug!(agent_id = %self.agent_id, what, detail, "refused a message about something the agent does not own");
        } else {
            tracing::warn!(agent_id = %self.agent_id, what, detail, "refused a message about something the agent does not own (further ones are logged at debug)");
        }
    }
}

/// Ranks remembered per session before the memory starts over (an agent
/// runs a handful of ranks per attempt; this bounds what a misbehaving one
/// can make the coordinator keep).
pub(super) const OWNED_CAPACITY: usize = 1024;

/// (training id, attempt, rank) placed on a session's agent, as learned
/// from the database.
#[derive(Default)]
pub(super) struct OwnedRanks(pub(super) HashSet<(String, i32, i32)>);

/// What became of a rank event: the agent may forget it (stored, or
/// refused for good), or must send it again to a coordinator that can store
/// it (this one does not lead, or lost its database).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Delivery {
    Done,
    Retry,
}
