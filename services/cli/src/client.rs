//! The connection to the coordinator, shared by every command.

use crate::errors::{error_chain, CliError};
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};

const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(15);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// A coordinator address as typed: `http://host:port`, or `host:port` (http assumed).
pub fn normalize_url(url: &str) -> String {
    let url = url.trim();
    if url.contains("://") {
        url.to_string()
    } else {
        format!("http://{url}")
    }
}

/// Where the coordinator is; commands dial it when they first need it, so
/// local mistakes (a bad config file) are reported without a coordinator.
#[derive(Debug, Clone)]
pub struct Coordinator {
    pub url: String,
    pub connect_timeout: Duration,
}

impl Coordinator {
    pub async fn channel(&self) -> Result<Channel, CliError> {
        connect(&self.url, self.connect_timeout).await
    }
}

/// Connects to the coordinator at `url`, failing with a human error after
/// `timeout` when nothing answers.
pub async fn connect(url: &str, timeout: Duration) -> Result<Channel, CliError> {
    let url = normalize_url(url);
    let endpoint = Endpoint::from_shared(url.clone())
        .map_err(|e| CliError::BadUrl {
            url: url.clone(),
            reason: error_chain(&e),
        })?
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
        let err = connect(&url, Duration::from_secs(2)).await.unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("cannot reach the coordinator at {url}: ")),
            "{text}"
        );
        assert_eq!(err.exit_code(), crate::errors::exit::UNAVAILABLE);
    }
}
