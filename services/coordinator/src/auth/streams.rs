//! Open streams end when their token does. A bearer token is checked when
//! a call begins; a server stream (WatchTraining, WatchGpuMetrics,
//! WatchAlerts, DownloadCheckpoint) can stay open for hours after that. The
//! auth layer wraps such a response's body in [`Guarded`], which checks the
//! token again every [`RECHECK`] and, once it is revoked or expired, ends
//! the stream between two messages with UNAUTHENTICATED in the trailers.
//! With the token cache's [`TTL`](super::cache::TTL) of 2 s, a revoked
//! token's streams end within about 3 s.
//!
//! A token holds at most [`MAX_PER_TOKEN`] such streams open at once
//! ([`OpenStreams`]); one more is refused with RESOURCE_EXHAUSTED
//! (TOO_MANY_STREAMS), so one client cannot pin the coordinator's memory
//! and tasks with thousands of idle watches.

use super::Authenticator;
use crate::error::ApiError;
use http_body::{Body, Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tonic::codegen::Bytes;

/// Streams one token may hold open at once.
pub const MAX_PER_TOKEN: usize = 64;

/// Open streams per token (by the secret's hash). Only authenticated
/// tokens get an entry, and an entry goes with its last stream, so the map
/// is bounded by the tokens in use.
#[derive(Debug, Default)]
pub struct OpenStreams(std::sync::Mutex<std::collections::HashMap<String, usize>>);

/// One open stream of a token; dropping it closes it.
pub struct Slot {
    streams: Arc<OpenStreams>,
    key: String,
}

impl OpenStreams {
    /// A slot for one more stream of `secret`, unless it holds the most.
    pub fn open(self: &Arc<Self>, secret: &str) -> Option<Slot> {
        let key = super::secret::hash(secret);
        let mut open = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(key.clone()).or_insert(0);
        if *n >= MAX_PER_TOKEN {
            return None;
        }
        *n += 1;
        Some(Slot {
            streams: self.clone(),
            key,
        })
    }

    /// Streams `secret` holds open now.
    pub fn held(&self, secret: &str) -> usize {
        let key = super::secret::hash(secret);
        let open = self.0.lock().unwrap_or_else(|p| p.into_inner());
        open.get(&key).copied().unwrap_or(0)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.streams.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// How often an open stream's token is checked again.
pub const RECHECK: Duration = Duration::from_secs(1);

/// The server-streaming methods a caller holds open.
pub const STREAMING: &[&str] = &[
    "/cohort.v1.TrainingService/WatchTraining",
    "/cohort.v1.TrainingService/DownloadCheckpoint",
    "/cohort.v1.TrainingService/WatchLogs",
    "/cohort.v1.TelemetryService/WatchGpuMetrics",
    "/cohort.v1.TelemetryService/WatchAlerts",
];

/// Resolves with the reason once `secret` no longer authenticates (a
/// database that cannot answer keeps the stream: it is not a revocation).
async fn invalidated(auth: Arc<Authenticator>, method: String, secret: String) -> String {
    loop {
        tokio::time::sleep(RECHECK).await;
        if let Err(denial) = auth.user(&method, Some(&secret)).await {
            if let ApiError::Unauthenticated(why) = denial.error {
                return why;
            }
        }
    }
}

/// A response body that ends with UNAUTHENTICATED once its token does.
pub struct Guarded {
    inner: tonic::body::Body,
    ended: Pin<Box<dyn Future<Output = String> + Send>>,
    done: bool,
    _slot: Slot,
}

impl Guarded {
    pub fn new(
        inner: tonic::body::Body,
        auth: Arc<Authenticator>,
        method: &str,
        secret: String,
        slot: Slot,
    ) -> Self {
        Self {
            inner,
            ended: Box::pin(invalidated(auth, method.to_string(), secret)),
            done: false,
            _slot: slot,
        }
    }
}

impl Body for Guarded {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        if let Poll::Ready(why) = this.ended.as_mut().poll(cx) {
            this.done = true;
            tracing::info!(reason = %why, "ending a stream: its token no longer authenticates");
            let end = tonic::Status::from(ApiError::Unauthenticated(format!(
                "{why}: the stream ended"
            )));
            let mut trailers = http::HeaderMap::new();
            return Poll::Ready(Some(
                end.add_header(&mut trailers)
                    .map(|()| Frame::trailers(trailers)),
            ));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(None) => {
                this.done = true;
                Poll::Ready(None)
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_holds_at_most_its_share_and_slots_give_back() {
        let streams = Arc::new(OpenStreams::default());
        let held: Vec<Slot> = (0..MAX_PER_TOKEN)
            .map(|_| streams.open("secret-a").expect("a slot"))
            .collect();
        assert!(streams.open("secret-a").is_none(), "one more is refused");
        assert!(
            streams.open("secret-b").is_some(),
            "another token has its own"
        );
        drop(held);
        assert_eq!(streams.held("secret-a"), 0);
        assert!(
            streams.0.lock().unwrap().is_empty(),
            "entries go with their last stream"
        );
    }
}
