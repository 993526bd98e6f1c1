//! The connection to the coordinator, shared by every command: TLS when the
//! URL says `https://` (trusting `--ca-cert`), and the bearer token, when
//! one is given, on every request.

use crate::errors::{error_chain, CliError};
use std::path::PathBuf;
use std::time::Duration;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(15);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// A channel that sends the caller's credentials with every request and
/// notes the member set of every answer ([`crate::members`]).
pub type Conn = InterceptedService<crate::members::Learn<Channel>, Credentials>;

/// A coordinator address as typed: `http://host:port`, or `host:port` (http assumed).
pub fn normalize_url(url: &str) -> String {
    let url = url.trim();
    if url.contains("://") {
        url.to_string()
    } else {
        format!("http://{url}")
    }
}

/// Where the coordinator is and how to prove who we are; commands dial it
/// when they first need it, so local mistakes (a bad config file) are
/// reported without a coordinator.
#[derive(Debug, Clone, Default)]
pub struct Coordinator {
    pub url: String,
    /// The `--coordinator` list as given: what the learned member set is
    /// kept under (the same after a NOT_LEADER answer reorders `url`).
    pub members_key: String,
    pub connect_timeout: Duration,
    /// The bearer token (`--token`, `COHORT_TOKEN`).
    pub token: Option<String>,
    /// The PEM CA the coordinator's certificate must chain to (`https://`).
    pub ca_cert: Option<PathBuf>,
    /// Send a token over plaintext to a host that is not this machine.
    pub allow_plaintext_token: bool,
}

impl Coordinator {
    /// Dials the first coordinator of the list that answers (`url` may be a
    /// comma-separated list: coordinators sharing PostgreSQL), then the
    /// members an earlier run learned for this list (same scheme only).
    pub async fn channel(&self) -> Result<Conn, CliError> {
        let credentials = Credentials::new(self.token.as_deref())?;
        let tls = match &self.ca_cert {
            Some(path) => Some(read_ca(path)?),
            None => None,
        };
        let mut unreachable = None;
        let given = split_urls(&self.url);
        let learned = crate::members::load(&self.members_key)
            .into_iter()
            .filter(|m| self.same_scheme(m))
            .filter(|m| !given.iter().any(|g| normalize_url(g) == normalize_url(m)));
        let urls: Vec<String> = given.iter().cloned().chain(learned).collect();
        for url in urls {
            if credentials.header.is_some() && !self.allow_plaintext_token {
                refuse_plaintext_token(&url)?;
            }
            match connect(&url, self.connect_timeout, tls.clone()).await {
                Ok(channel) => {
                    let channel = crate::members::Learn::new(channel);
                    return Ok(InterceptedService::new(channel, credentials));
                }
                Err(e @ CliError::Unreachable { .. }) => {
                    tracing::debug!(%url, error = %e, "trying the next coordinator");
                    unreachable = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(unreachable.unwrap_or_else(|| CliError::Usage("--coordinator names no address".into())))
    }

    /// Whether `url` has the scheme of the first coordinator of the list.
    pub fn same_scheme(&self, url: &str) -> bool {
        let first = split_urls(&self.url).into_iter().next().unwrap_or_default();
        scheme(&normalize_url(&first)) == scheme(&normalize_url(url))
    }

    /// The same coordinator list with `leader` first: what a standby's
    /// NOT_LEADER answer sends the command to.
    pub fn led_by(&self, leader: &str) -> Coordinator {
        let mut urls = vec![leader.to_string()];
        urls.extend(
            split_urls(&self.url)
                .into_iter()
                .filter(|u| normalize_url(u) != normalize_url(leader)),
        );
        Coordinator {
            url: urls.join(","),
            ..self.clone()
        }
    }
}

fn scheme(url: &str) -> &str {
    url.split_once("://").map_or("", |(s, _)| s)
}

/// The host of a URL (`[::1]` without its brackets).
fn host(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or_default();
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split(']').next().unwrap_or_default();
    }
    authority.split(':').next().unwrap_or_default()
}

/// A token goes over plaintext only to this machine: to anything else a
/// plaintext `http://` URL would hand it to whoever is on the path.
fn refuse_plaintext_token(url: &str) -> Result<(), CliError> {
    let url = normalize_url(url);
    if scheme(&url) != "http" {
        return Ok(());
    }
    let host = host(&url);
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if loopback {
        return Ok(());
    }
    Err(CliError::Usage(format!(
        "refusing to send the token over plaintext to {url}: use https:// (with --ca-cert), or --allow-plaintext-token if you accept that anyone on the path can read it"
    )))
}

/// `a,b,c` as addresses (blanks dropped).
pub fn split_urls(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(String::from)
        .collect()
}

/// Adds `authorization: Bearer <token>` to every request, when there is a token.
#[derive(Debug, Clone)]
pub struct Credentials {
    header: Option<MetadataValue<Ascii>>,
}

impl Credentials {
    pub fn new(token: Option<&str>) -> Result<Self, CliError> {
        let header = match token.map(str::trim).filter(|t| !t.is_empty()) {
            None => None,
            Some(token) => Some(format!("Bearer {token}").parse().map_err(|_| {
                CliError::Usage("the token holds characters a token never has".into())
            })?),
        };
        Ok(Self { header })
    }
}

impl Interceptor for Credentials {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(header) = &self.header {
            request
                .metadata_mut()
                .insert("authorization", header.clone());
        }
        Ok(request)
    }
}

fn read_ca(path: &PathBuf) -> Result<Certificate, CliError> {
    std::fs::read(path).map(Certificate::from_pem).map_err(|e| {
        CliError::Usage(format!(
            "cannot read the CA certificate {}: {e}",
            path.display()
        ))
    })
}

/// Connects to the coordinator at `url`, failing with a human error after
/// `timeout` when nothing answers. An `https://` URL needs the CA (`ca`).
pub async fn connect(
    url: &str,
    timeout: Duration,
    ca: Option<Certificate>,
) -> Result<Channel, CliError> {
    let url = normalize_url(url);
    let bad_url = |reason: String| CliError::BadUrl {
        url: url.clone(),
        reason,
    };
    let mut endpoint = Endpoint::from_shared(url.clone()).map_err(|e| bad_url(error_chain(&e)))?;
    if url.starts_with("https://") {
        let ca = ca.ok_or_else(|| {
            bad_url("an https:// coordinator needs the CA that signed its certificate: --ca-cert FILE or COHORT_CA_CERT".into())
        })?;
        endpoint = endpoint
            .tls_config(ClientTlsConfig::new().ca_certificate(ca))
            .map_err(|e| bad_url(error_chain(&e)))?;
    }
    let endpoint = endpoint
        .connect_timeout(timeout)
        // Streams stay open for hours: notice a coordinator that vanished
        // without closing the connection.
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true);
    tracing::debug!(%url, "connecting");
    match tokio::time::timeout(timeout, endpoint.connect()).await {
        Ok(Ok(channel)) => Ok(channel),
        Ok(Err(e)) => Err(CliError::Unreachable {
            url,
            reason: error_chain(&e),
        }),
        Err(_) => Err(CliError::Unreachable {
            url,
            reason: format!("no answer within {} s", timeout.as_secs_f64()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheme_is_added_when_missing() {
        assert_eq!(normalize_url("127.0.0.1:1"), "http://127.0.0.1:1");
        assert_eq!(normalize_url("https://a:1"), "https://a:1");
    }

    #[tokio::test]
    async fn refused_connection_is_a_human_error() {
        // Bind and drop a listener to get a port where nothing listens.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let url = format!("http://127.0.0.1:{port}");
        let err = connect(&url, Duration::from_secs(2), None)
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("cannot reach the coordinator at {url}: ")),
            "{text}"
        );
        assert_eq!(err.exit_code(), crate::errors::exit::UNAVAILABLE);
    }

    #[test]
    fn https_needs_a_ca() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let err = rt
            .block_on(connect("https://127.0.0.1:1", Duration::from_secs(1), None))
            .unwrap_err();
        assert!(err.to_string().contains("--ca-cert"), "{err}");
        assert_eq!(err.exit_code(), crate::errors::exit::USAGE);
    }

    #[test]
    fn a_leader_goes_first_once() {
        let c = Coordinator {
            url: "a:1, http://b:2".into(),
            ..Default::default()
        };
        assert_eq!(c.led_by("http://b:2").url, "http://b:2,a:1");
        assert_eq!(c.led_by("http://c:3").url, "http://c:3,a:1,http://b:2");
    }

    #[tokio::test]
    async fn an_unreachable_coordinator_of_a_list_is_skipped() {
        let dead = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let live = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let live_port = live.local_addr().unwrap().port();
        tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(live);
            let (_, health) = tonic_health::server::health_reporter();
            let _ = tonic::transport::Server::builder()
                .add_service(health)
                .serve_with_incoming(incoming)
                .await;
        });
        let c = Coordinator {
            url: format!("127.0.0.1:{dead},127.0.0.1:{live_port}"),
            connect_timeout: Duration::from_secs(2),
            ..Default::default()
        };
        assert!(c.channel().await.is_ok());
        let none = Coordinator {
            url: format!("127.0.0.1:{dead}"),
            connect_timeout: Duration::from_secs(2),
            ..Default::default()
        };
        assert!(matches!(
            none.channel().await,
            Err(CliError::Unreachable { .. })
        ));
    }

    #[test]
    fn a_token_goes_over_plaintext_only_to_this_machine() {
        for ok in [
            "http://127.0.0.1:50051",
            "localhost:1",
            "http://[::1]:2",
            "https://gpu.example:50051",
        ] {
            assert!(refuse_plaintext_token(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://10.0.0.7:50051",
            "coordinator.internal:50051",
            "http://[fe80::1]:1",
        ] {
            let err = refuse_plaintext_token(bad).unwrap_err();
            assert!(
                err.to_string().contains("refusing to send the token"),
                "{err}"
            );
        }
    }

    #[test]
    fn a_leader_of_another_scheme_is_not_followed() {
        let c = Coordinator {
            url: "https://a:1,https://b:2".into(),
            ..Default::default()
        };
        assert!(c.same_scheme("https://c:3"));
        assert!(!c.same_scheme("http://c:3"));
        let plain = Coordinator {
            url: "a:1".into(),
            ..Default::default()
        };
        assert!(plain.same_scheme("http://b:2"));
        assert!(!plain.same_scheme("https://b:2"));
    }

    #[test]
    fn the_token_goes_on_every_request() {
        let mut with = Credentials::new(Some(" secret-1 ")).unwrap();
        let request = with.call(tonic::Request::new(())).unwrap();
        assert_eq!(
            request.metadata().get("authorization").unwrap(),
            "Bearer secret-1"
        );
        let mut without = Credentials::new(None).unwrap();
        let request = without.call(tonic::Request::new(())).unwrap();
        assert!(request.metadata().get("authorization").is_none());
        assert!(Credentials::new(Some("bad\ntoken")).is_err());
    }
}
