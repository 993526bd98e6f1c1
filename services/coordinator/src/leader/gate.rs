//! The tower layer that keeps changes off a standby: on a coordinator that
//! does not lead, every method outside [`STANDBY_METHODS`] is forwarded to
//! the leader ([`super::forward`]) or, when it cannot be (an agent's
//! session, no leader yet, forwarding off, a request forwarded already),
//! answered UNAVAILABLE with reason NOT_LEADER and, when a leader holds a
//! live lease, its URL in the ErrorInfo metadata `leader` (what the CLI and
//! the agents follow). Health and reflection always pass. Nothing is
//! written here for a refused call: it never reaches a handler.

use super::forward::{Forwarder, FORWARDED_HEADER};
use super::Leadership;
use crate::error::ApiError;
use http::{Request, Response};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::{Layer, Service};

/// What a standby answers from the database: reads that need neither the
/// live fleet (in the leader's memory) nor the leader's files.
pub const STANDBY_METHODS: &[&str] = &[
    "/cohort.v1.TrainingService/GetTraining",
    "/cohort.v1.TrainingService/ListTrainings",
    "/cohort.v1.TrainingService/WatchTraining",
    "/cohort.v1.TrainingService/ListCheckpoints",
    "/cohort.v1.TelemetryService/QueryGpuMetrics",
    "/cohort.v1.GpuService/EstimateMemory",
    "/cohort.v1.AdminService/ListTokens",
    "/cohort.v1.AdminService/ListQuotas",
    "/cohort.v1.AdminService/ListAuditEvents",
    "/cohort.v1.AdminService/WhoAmI",
];

/// Whether a standby may serve `path` itself.
pub fn served_by_standby(path: &str) -> bool {
    !path.starts_with("/cohort.v1.") || STANDBY_METHODS.contains(&path)
}

/// The NOT_LEADER answer, naming the leader when one is known.
pub fn not_leader(path: &str, leader: Option<&str>) -> tonic::Status {
    ApiError::NotLeader {
        method: path.trim_start_matches('/').to_string(),
        leader: leader.map(str::to_string),
    }
    .into()
}

/// Response metadata of every call: the coordinators' `--advertise` URLs,
/// comma-separated (the member set), so a client that knew one learns the
/// others (the CLI keeps them for its next run).
pub const MEMBERS_HEADER: &str = "cohort-members";

/// Never forwarded: an agent holds its session with the leader itself.
const NEVER_FORWARDED: &[&str] = &["/cohort.v1.AgentService/Connect"];

#[derive(Clone)]
pub struct GateLayer {
    leadership: Leadership,
    forwarder: Arc<Forwarder>,
}

impl GateLayer {
    pub fn new(leadership: Leadership, forwarder: Arc<Forwarder>) -> Self {
        Self {
            leadership,
            forwarder,
        }
    }
}

impl<S> Layer<S> for GateLayer {
    type Service = Gate<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Gate {
            inner,
            leadership: self.leadership.clone(),
            forwarder: self.forwarder.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Gate<S> {
    inner: S,
    leadership: Leadership,
    forwarder: Arc<Forwarder>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

type Body = tonic::body::Body;

impl<S> Service<Request<Body>> for Gate<S>
where
    S: Service<Request<Body>, Response = Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        let members = self.leadership.members_header();
        if self.leadership.is_leader() || served_by_standby(request.uri().path()) {
            // The clone that was polled ready serves this call.
            let clone = self.inner.clone();
            let mut inner = std::mem::replace(&mut self.inner, clone);
            return Box::pin(async move {
                let mut response = inner.call(request).await?;
                if let Some(members) = members {
                    response.headers_mut().insert(MEMBERS_HEADER, members);
                }
                Ok(response)
            });
        }
        let path = request.uri().path().to_string();
        let leader = self.leadership.role().leader_hint().map(str::to_string);
        let forwarded_already = request.headers().contains_key(FORWARDED_HEADER);
        let channel = match &leader {
            Some(url) if !forwarded_already && !NEVER_FORWARDED.contains(&path.as_str()) => {
                match self.forwarder.channel(url) {
                    Ok(channel) => Some(channel),
                    Err(e) => {
                        tracing::debug!(%path, error = %e, "not forwarding a change");
                        None
                    }
                }
            }
            _ => None,
        };
        let Some(channel) = channel else {
            tracing::debug!(%path, leader = ?leader, "refused a change on a standby");
            let mut refusal = not_leader(&path, leader.as_deref()).into_http();
            if let Some(members) = members {
                refusal.headers_mut().insert(MEMBERS_HEADER, members);
            }
            return Box::pin(async move { Ok(refusal) });
        };
        if let Ok(me) = http::HeaderValue::from_str(&self.forwarder.settings().me) {
            request.headers_mut().insert(FORWARDED_HEADER, me);
        }
        Box::pin(async move {
            use tower::ServiceExt;
            match channel.oneshot(request).await {
                Ok(response) => Ok(response),
                Err(e) => {
                    // The leader did not answer: the client retries (on it).
                    tracing::warn!(%path, leader = ?leader, error = %e, "cannot forward a change to the leader");
                    Ok(not_leader(&path, leader.as_deref()).into_http())
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cohort_proto::error::Reason;

    #[test]
    fn standbys_serve_reads_health_and_reflection_only() {
        assert!(served_by_standby("/cohort.v1.TrainingService/GetTraining"));
        assert!(served_by_standby("/grpc.health.v1.Health/Check"));
        assert!(served_by_standby(
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
        ));
        for change in [
            "/cohort.v1.TrainingService/CreateTraining",
            "/cohort.v1.TrainingService/CancelTraining",
            "/cohort.v1.AgentService/Connect",
            "/cohort.v1.AdminService/CreateToken",
            "/cohort.v1.GpuService/ListGpus",
            "/cohort.v1.TelemetryService/WatchGpuMetrics",
        ] {
            assert!(!served_by_standby(change), "{change}");
        }
    }

    #[test]
    fn the_refusal_names_the_leader() {
        use cohort_proto::error::reason_of;
        let s = not_leader(
            "/cohort.v1.TrainingService/CreateTraining",
            Some("http://b:1"),
        );
        assert_eq!(s.code(), tonic::Code::Unavailable);
        assert_eq!(reason_of(&s), Some(Reason::NotLeader));
        assert!(s.message().contains("http://b:1"), "{}", s.message());
        let none = not_leader("/cohort.v1.TrainingService/CreateTraining", None);
        assert_eq!(reason_of(&none), Some(Reason::NotLeader));
    }
}
