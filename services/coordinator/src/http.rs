//! What the coordinator's outgoing HTTP (webhooks, trackers) shares: a
//! client with a deadline per call, and a transport error in words.

use std::time::Duration;

/// A client whose every call ends within `timeout`.
pub fn client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .unwrap_or_default()
}

/// A transport error with its causes (reqwest's own text omits them).
pub fn describe(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}
