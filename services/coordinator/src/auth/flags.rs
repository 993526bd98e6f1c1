//! The coordinator's security flags and the rule they must obey: secure by
//! default. Off loopback it listens only with TLS, token auth and an agent
//! CA, unless `--insecure` says otherwise in so many words.

use super::AuthMode;
use crate::tls::TlsFiles;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// `--auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AuthFlag {
    /// `none` on a loopback address, `token` on any other.
    Auto,
    /// Bearer tokens, deny by default.
    Token,
    /// No authentication: every caller may do everything.
    None,
}

#[derive(Debug, Clone, clap::Args)]
pub struct SecurityFlags {
    /// How users authenticate: auto (none on loopback, token elsewhere),
    /// token, or none.
    #[arg(long, value_enum, default_value = "auto", env = "COHORT_AUTH")]
    pub auth: AuthFlag,
    /// PEM certificate chain of the server: the listener speaks TLS only.
    #[arg(
        long,
        env = "COHORT_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(
        long,
        env = "COHORT_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
    /// PEM CA that signs agents' client certificates: AgentService then
    /// needs one, and an agent's name is its certificate's identity.
    #[arg(
        long,
        env = "COHORT_AGENT_CA",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub agent_ca: Option<PathBuf>,
    /// Which agent names an agent CA may certify: ISSUER=PATTERN[,PATTERN]
    /// (the issuing CA's common name; `*` matches any run), repeatable.
    /// Once given, a CA without a list certifies no agent.
    #[arg(
        long = "agent-names",
        value_name = "ISSUER=PATTERNS",
        requires = "agent_ca"
    )]
    pub agent_names: Vec<super::agent_names::AgentNamesFlag>,
    /// Allow a non-loopback listener without TLS, token auth or an agent CA.
    #[arg(long)]
    pub insecure: bool,
    /// How long audit rows are kept.
    #[arg(long, default_value = "90d", value_parser = cohort_spec::duration::parse_duration, value_name = "SPAN")]
    pub audit_retention: Duration,
}

/// What the flags resolve to.
#[derive(Debug, Clone)]
pub struct Security {
    pub mode: AuthMode,
    pub tls: Option<TlsFiles>,
    /// Agents must present a certificate of the agent CA.
    pub agent_certs: bool,
    /// The names each agent CA may certify (`--agent-names`).
    pub agent_names: super::agent_names::AgentNames,
}

impl SecurityFlags {
    /// The security of a server on `listen`, or why it must not start.
    pub fn resolve(&self, listen: SocketAddr) -> Result<Security, String> {
        let loopback = listen.ip().is_loopback();
        let mode = match self.auth {
            AuthFlag::Token => AuthMode::Token,
            AuthFlag::None => AuthMode::None,
            AuthFlag::Auto if loopback => AuthMode::None,
            AuthFlag::Auto => AuthMode::Token,
        };
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.agent_ca.clone(),
            }),
            _ => None,
        };
        if !loopback && !self.insecure {
            let mut missing = Vec::new();
            if tls.is_none() {
                missing.push("TLS (--tls-cert and --tls-key)");
            }
            if mode != AuthMode::Token {
                missing.push("token auth (--auth token)");
            }
            if self.agent_ca.is_none() {
                missing.push("agent certificates (--agent-ca)");
            }
            if !missing.is_empty() {
                return Err(format!(
                    "refusing to listen on {listen}, which is not a loopback address, without {}: \
                     anyone who reaches the port could read and change every team's trainings \
                     or pose as an agent; give them, or pass --insecure to accept that",
                    missing.join(", ")
                ));
            }
        }
        Ok(Security {
            mode,
            agent_certs: self.agent_ca.is_some(),
            agent_names: super::agent_names::AgentNames::new(&self.agent_names),
            tls,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        flags: SecurityFlags,
    }

    fn flags(args: &[&str]) -> SecurityFlags {
        Cli::try_parse_from(std::iter::once("c").chain(args.iter().copied()))
            .unwrap()
            .flags
    }

    #[test]
    fn loopback_defaults_to_no_auth_and_elsewhere_to_tokens() {
        let local = flags(&[]).resolve("127.0.0.1:1".parse().unwrap()).unwrap();
        assert_eq!(local.mode, AuthMode::None);
        assert!(local.tls.is_none() && !local.agent_certs);
        let tls = ["--tls-cert", "c", "--tls-key", "k", "--agent-ca", "a"];
        let remote = flags(&tls).resolve("0.0.0.0:1".parse().unwrap()).unwrap();
        assert_eq!(remote.mode, AuthMode::Token);
        assert!(remote.agent_certs);
    }

    #[test]
    fn off_loopback_without_tls_tokens_and_agent_ca_is_refused_unless_insecure() {
        let any: SocketAddr = "0.0.0.0:50051".parse().unwrap();
        let err = flags(&["--auth", "none"]).resolve(any).unwrap_err();
        assert!(
            err.contains("TLS") && err.contains("--auth token") && err.contains("--insecure"),
            "{err}"
        );
        let no_ca = flags(&["--tls-cert", "c", "--tls-key", "k"])
            .resolve(any)
            .unwrap_err();
        assert!(
            no_ca.contains("--agent-ca") && !no_ca.contains("--tls-cert"),
            "{no_ca}"
        );
        let insecure = flags(&["--auth", "none", "--insecure"])
            .resolve(any)
            .unwrap();
        assert_eq!(insecure.mode, AuthMode::None);
        // A certificate without its key is a usage error.
        let cli = Cli::try_parse_from(["c", "--tls-cert", "c"]);
        assert!(cli.is_err());
    }
}
