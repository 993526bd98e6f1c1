//! A cluster's security: the flags its coordinators start with (TLS, an
//! agent CA, the auth mode), the channels and URLs that follow from them,
//! and the tokens made before it starts.

use super::Cluster;
use crate::secure::CertPair;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

/// How the coordinators are secured; the default is what a plain
/// `cohort-coordinator` does (plaintext, its default auth mode).
#[derive(Debug, Clone, Default)]
pub struct Security {
    /// `--auth` (`token`, `none`, `auto`); `None` passes no flag.
    pub auth: Option<String>,
    /// `--tls-cert`/`--tls-key`, and the CA the harness's clients trust.
    pub tls: Option<ServerTls>,
    /// `--agent-ca`: agents present certificates it signed.
    pub agent_ca: Option<PathBuf>,
}

/// The coordinator's certificate and the CA that signed it.
#[derive(Debug, Clone)]
pub struct ServerTls {
    pub pair: CertPair,
    pub ca: PathBuf,
}

impl Security {
    /// Token auth, nothing else.
    pub fn tokens() -> Security {
        Security {
            auth: Some("token".into()),
            ..Security::default()
        }
    }

    /// The coordinator flags these settings take.
    pub(super) fn apply(&self, command: &mut Command) {
        if let Some(auth) = &self.auth {
            command.arg("--auth").arg(auth);
        }
        if let Some(tls) = &self.tls {
            command
                .arg("--tls-cert")
                .arg(&tls.pair.cert)
                .arg("--tls-key")
                .arg(&tls.pair.key);
        }
        if let Some(ca) = &self.agent_ca {
            command.arg("--agent-ca").arg(ca);
        }
    }

    /// `https` with TLS, else `http`.
    pub(super) fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// The CA the harness's clients trust (TLS only).
    pub fn client_ca(&self) -> Option<&Path> {
        self.tls.as_ref().map(|t| t.ca.as_path())
    }
}

/// A channel to `url` that trusts `ca` (TLS) or is plaintext (`None`),
/// given up after `timeout`.
pub async fn connect(
    url: &str,
    ca: Option<&Path>,
    timeout: Duration,
) -> Result<Channel, tonic::transport::Error> {
    let mut endpoint = Endpoint::from_shared(url.to_string())?.connect_timeout(timeout);
    if let Some(ca) = ca {
        let pem = std::fs::read(ca).expect("reading the CA");
        endpoint = endpoint.tls_config(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(pem))
                .domain_name("127.0.0.1"),
        )?;
    }
    endpoint.connect().await
}

impl Cluster {
    /// A channel to coordinator 0 that trusts `ca` (TLS) or none
    /// (plaintext): a client with the wrong CA, or a rotated one's.
    pub async fn channel_with(
        &self,
        ca: Option<&Path>,
    ) -> Result<Channel, tonic::transport::Error> {
        connect(&self.url(), ca, Duration::from_secs(3)).await
    }

    /// Coordinator 0's port as plaintext `http://` (to show TLS refuses it).
    pub fn plain_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `cohort-coordinator token create` against this cluster's database,
    /// before it starts (on SQLite the running coordinator holds the
    /// file): the secret.
    pub fn bootstrap_token(&self, team: &str, name: &str, role: &str) -> String {
        let output = Command::new(&self.bins.coordinator)
            .args(["token", "create", "--data-dir"])
            .arg(self.data_dir())
            .args(self.db().coordinator_args())
            .args(["--team", team, "--name", name, "--role", role])
            .env_remove("COHORT_DATABASE_URL")
            .output()
            .expect("running token create");
        assert!(
            output.status.success(),
            "token create failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let stdout = String::from_utf8_lossy(&output.stdout);
        stdout.lines().last().expect("a secret").trim().to_string()
    }

    /// A token-auth coordinator on SQLite with `extra` flags and no agent,
    /// started, with the bootstrap tokens ops/root (cluster-admin),
    /// vision/dev and nlp/dev (editors), in that order.
    pub async fn with_team_tokens(extra: Vec<String>) -> (Cluster, [String; 3]) {
        let mut options = super::ClusterOptions::new(crate::db::Backend::Sqlite, 0);
        options.security = Security::tokens();
        options.coordinator_args = extra;
        let mut c = Cluster::prepare(options);
        let root = c.bootstrap_token("ops", "root", "cluster-admin");
        let vision = c.bootstrap_token("vision", "dev", "editor");
        let nlp = c.bootstrap_token("nlp", "dev", "editor");
        c.launch().await;
        (c, [root, vision, nlp])
    }
}
