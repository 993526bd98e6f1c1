//! The TLS listener: rustls (aws-lc-rs) with the server's certificate and,
//! with `--agent-ca`, client certificates verified against that CA but not
//! required at the TLS layer (users may come with tokens alone; the auth
//! layer requires a certificate for `AgentService`). A plaintext client
//! fails the handshake. The files are re-read on [`TlsReloader::reload`]
//! (SIGHUP): new connections use the new certificate, open ones keep theirs,
//! except agent sessions whose certificate the reloaded `--agent-ca` no
//! longer verifies: they end ([`AgentCa`]).

mod agent_ca;
mod config;
mod conn;
mod identity;

pub use agent_ca::AgentCa;
pub use config::{ClientVerifier, TlsError, TlsFiles};
pub use conn::{PeerInfo, TlsConn};
pub use identity::{identity_of, issuer_of, PeerIdentity};

use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;

/// How long a client has to finish its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at once; more connections wait to be accepted.
pub const MAX_HANDSHAKES: usize = 256;
/// Handshakes in progress at once from one peer address: past this its
/// new connections are closed at once, so one host opening connections
/// and never finishing them cannot take every handshake slot.
pub const MAX_HANDSHAKES_PER_PEER: usize = 16;

/// Handshakes in progress per peer address (an entry goes with its last
/// handshake, so there are at most [`MAX_HANDSHAKES`]).
#[derive(Default)]
struct PerPeer(std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>);

impl PerPeer {
    fn enter(&self, ip: std::net::IpAddr) -> bool {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = m.entry(ip).or_insert(0);
        if *n >= MAX_HANDSHAKES_PER_PEER {
            return false;
        }
        *n += 1;
        true
    }

    fn leave(&self, ip: std::net::IpAddr) {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = m.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&ip);
            }
        }
    }
}

/// A TCP listener whose connections are TLS, with a reloadable config.
pub struct TlsListener {
    listener: TcpListener,
    reloader: TlsReloader,
}

/// Reloads the listener's certificate, key and client CA (cheap to clone).
#[derive(Clone)]
pub struct TlsReloader {
    files: TlsFiles,
    config: Arc<RwLock<Arc<rustls::ServerConfig>>>,
    agent_ca: AgentCa,
}

impl TlsReloader {
    /// Re-reads the files; on an error the old config stays in use. Agent
    /// sessions are told of the new client CA once it is in use.
    pub fn reload(&self) -> Result<(), TlsError> {
        let verifier = self.files.client_verifier()?;
        let fresh = self.files.server_config(verifier.clone())?;
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = fresh;
        self.agent_ca.publish(verifier);
        tracing::info!(cert = %self.files.cert.display(), "TLS certificate and keys reloaded");
        Ok(())
    }
}

impl TlsListener {
    /// Loads the files (an error names the file and what is wrong with it).
    pub fn new(listener: TcpListener, files: TlsFiles) -> Result<Self, TlsError> {
        let verifier = files.client_verifier()?;
        let config = Arc::new(RwLock::new(files.server_config(verifier.clone())?));
        Ok(Self {
            listener,
            reloader: TlsReloader {
                files,
                config,
                agent_ca: AgentCa::new(verifier),
            },
        })
    }

    pub fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    pub fn reloader(&self) -> TlsReloader {
        self.reloader.clone()
    }

    /// What agent sessions watch to end when a reload stops trusting them.
    pub fn agent_ca(&self) -> AgentCa {
        self.reloader.agent_ca.clone()
    }

    /// The stream of established TLS connections: an accept loop hands each
    /// TCP connection to its own handshake task, so a slow or hostile
    /// client never holds up the others. Ends when `stop` resolves.
    pub fn incoming(
        self,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> tokio_stream::wrappers::ReceiverStream<std::io::Result<TlsConn>> {
        let (tx, rx) = mpsc::channel(64);
        let handshakes = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
        let per_peer = Arc::new(PerPeer::default());
        tokio::spawn(async move {
            tokio::pin!(stop);
            loop {
                let permit = tokio::select! {
                    _ = &mut stop => return,
                    permit = handshakes.clone().acquire_owned() => match permit {
                        Ok(p) => p,
                        Err(_) => return,
                    },
                };
                let accepted = tokio::select! {
                    _ = &mut stop => return,
                    accepted = self.listener.accept() => accepted,
                };
                let (tcp, remote) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if !per_peer.enter(remote.ip()) {
                    tracing::debug!(peer = %remote, "too many handshakes from this address: closing");
                    continue;
                }
                let _ = tcp.set_nodelay(true);
                let config = self
                    .reloader
                    .config
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone();
                let tx = tx.clone();
                let per_peer = per_peer.clone();
                tokio::spawn(async move {
                    let _permit = permit;
                    let handshake = TlsAcceptor::from(config).accept(tcp);
                    let done = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await;
                    per_peer.leave(remote.ip());
                    match done {
                        Ok(Ok(stream)) => {
                            let _ = tx.send(Ok(TlsConn::new(stream, remote))).await;
                        }
                        Ok(Err(e)) => {
                            tracing::info!(peer = %remote, error = %e, "TLS handshake refused")
                        }
                        Err(_) => tracing::info!(peer = %remote, "TLS handshake timed out"),
                    }
                });
            }
        });
        tokio_stream::wrappers::ReceiverStream::new(rx)
    }
}

/// Reloads on every SIGHUP until `stop` resolves (rotation without a
/// restart); a reload that fails keeps the old files in use and says why.
pub async fn reload_on_sighup(reloader: TlsReloader, stop: impl std::future::Future<Output = ()>) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP: certificates reload only on restart");
            return;
        }
    };
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            got = hangups.recv() => {
                if got.is_none() {
                    return;
                }
                if let Err(e) = reloader.reload() {
                    tracing::error!(error = %e, "TLS reload failed; the previous certificate stays in use");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_holds_at_most_its_share_of_handshakes() {
        let peers = PerPeer::default();
        let a: std::net::IpAddr = "10.0.0.1".parse().unwrap();
        let b: std::net::IpAddr = "10.0.0.2".parse().unwrap();
        for _ in 0..MAX_HANDSHAKES_PER_PEER {
            assert!(peers.enter(a));
        }
        assert!(!peers.enter(a), "one more from a is closed");
        assert!(peers.enter(b), "b has its own share");
        peers.leave(a);
        assert!(peers.enter(a), "a finished one: another may start");
        for _ in 0..MAX_HANDSHAKES_PER_PEER {
            peers.leave(a);
        }
        peers.leave(b);
        assert!(
            peers.0.lock().unwrap().is_empty(),
            "entries go with their last handshake"
        );
    }
}
