//! Changes sent to a standby are forwarded to the leader, unchanged (the
//! caller's token and deadline included): the leader authenticates,
//! authorizes and answers, and the standby relays the answer, stream or
//! not. So a client behind one address (a Kubernetes Service in front of
//! every coordinator) needs no leader address of its own. Agents' sessions
//! are never forwarded: an agent follows the NOT_LEADER answer to the
//! leader itself. A request forwarded once is not forwarded again.

use std::sync::Mutex;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

/// Marks a request a standby forwarded (its value: that standby's URL).
pub const FORWARDED_HEADER: &str = "x-cohort-forwarded-by";

/// How long connecting to the leader may take before the caller is told
/// UNAVAILABLE.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// How a standby reaches the leader.
#[derive(Debug, Clone, Default)]
pub struct ForwardSettings {
    /// Off: changes on a standby are answered NOT_LEADER with the leader's URL.
    pub enabled: bool,
    /// This coordinator's URL (the value of [`FORWARDED_HEADER`]).
    pub me: String,
    /// The CA of the other coordinators' certificates (`https://` leaders).
    pub peer_ca: Option<Vec<u8>>,
    /// The name their certificates carry, when not the advertised host
    /// (e.g. the Service's DNS name while pods advertise their IPs).
    pub peer_tls_name: Option<String>,
}

/// A channel to the current leader, rebuilt when the leader changes.
#[derive(Debug, Default)]
pub struct Forwarder {
    settings: ForwardSettings,
    channel: Mutex<Option<(String, Channel)>>,
}

/// Why a change cannot be forwarded (the caller gets NOT_LEADER instead).
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("forwarding is off")]
    Off,
    #[error("the leader's URL {0} is https:// and no --peer-ca was given")]
    NoPeerCa(String),
    #[error("the leader's URL {url} is unusable: {reason}")]
    BadUrl { url: String, reason: String },
}

impl Forwarder {
    pub fn new(settings: ForwardSettings) -> Self {
        Self {
            settings,
            channel: Mutex::new(None),
        }
    }

    pub fn settings(&self) -> &ForwardSettings {
        &self.settings
    }

    /// The channel to `leader` (connected lazily, kept while it leads).
    pub fn channel(&self, leader: &str) -> Result<Channel, ForwardError> {
        if !self.settings.enabled {
            return Err(ForwardError::Off);
        }
        let mut cached = self.channel.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((url, channel)) = cached.as_ref() {
            if url == leader {
                return Ok(channel.clone());
            }
        }
        let channel = self.connect(leader)?;
        *cached = Some((leader.to_string(), channel.clone()));
        Ok(channel)
    }

    fn connect(&self, leader: &str) -> Result<Channel, ForwardError> {
        let bad = |reason: String| ForwardError::BadUrl {
            url: leader.to_string(),
            reason,
        };
        let mut endpoint = Endpoint::from_shared(leader.to_string())
            .map_err(|e| bad(e.to_string()))?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true);
        if leader.starts_with("https://") {
            let ca = self
                .settings
                .peer_ca
                .clone()
                .ok_or_else(|| ForwardError::NoPeerCa(leader.to_string()))?;
            let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
            if let Some(name) = &self.settings.peer_tls_name {
                tls = tls.domain_name(name.clone());
            }
            endpoint = endpoint.tls_config(tls).map_err(|e| bad(e.to_string()))?;
        }
        Ok(endpoint.connect_lazy())
    }
}
