//! The client CA agent sessions are checked against, as it is reloaded.
//!
//! rustls verifies a client certificate once, at the handshake. An agent
//! session lives for days on one connection, so a SIGHUP that replaces
//! `--agent-ca` (a compromised CA, a rotation) would otherwise leave the
//! old CA's agents connected. Each session keeps its certificate chain and
//! watches this; when a reload publishes a verifier that no longer accepts
//! the chain, the session ends, and the agent's reconnect fails its
//! handshake until it has a certificate of the new CA.

use super::ClientVerifier;
use rustls::pki_types::{CertificateDer, UnixTime};
use tokio::sync::watch;

/// The current `--agent-ca` verifier (none without `--agent-ca`).
#[derive(Clone)]
pub struct AgentCa {
    tx: std::sync::Arc<watch::Sender<Option<ClientVerifier>>>,
}

impl Default for AgentCa {
    /// No TLS, or no `--agent-ca`: nothing to check, nothing ever changes.
    fn default() -> Self {
        Self::new(None)
    }
}

impl std::fmt::Debug for AgentCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentCa")
            .field("verifier", &self.tx.borrow().is_some())
            .finish()
    }
}

impl AgentCa {
    pub fn new(verifier: Option<ClientVerifier>) -> Self {
        Self {
            tx: std::sync::Arc::new(watch::channel(verifier).0),
        }
    }

    /// A reload's verifier, for every session to check itself against.
    pub fn publish(&self, verifier: Option<ClientVerifier>) {
        self.tx.send_replace(verifier);
    }

    /// Resolves when a reload publishes a verifier that refuses `chain`
    /// (leaf first); never for an empty chain (no client certificate) or
    /// while every published verifier accepts it. Without `--agent-ca`
    /// any more, certificates are not checked, so nothing ends.
    pub async fn refused(&self, chain: &[CertificateDer<'static>]) {
        let Some((leaf, intermediates)) = chain.split_first() else {
            return std::future::pending().await;
        };
        let mut rx = self.tx.subscribe();
        loop {
            if rx.changed().await.is_err() {
                return std::future::pending().await;
            }
            let verifier = rx.borrow_and_update().clone();
            if let Some(v) = verifier {
                if let Err(e) = v.verify_client_cert(leaf, intermediates, UnixTime::now()) {
                    tracing::warn!(error = %e, "an agent's certificate no longer verifies against the reloaded --agent-ca");
                    return;
                }
            }
        }
    }
}
