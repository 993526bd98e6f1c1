//! The tower layer that authenticates and authorizes every call before any
//! handler runs: open services pass; anything else needs its permission
//! ([`super::permissions`]); a refused call is answered at once (its audit
//! row written), an allowed one carries its [`Principal`] to the handler.

use super::permissions;
use super::{Authenticator, Denial};
use crate::error::ApiError;
use crate::model::{AuditEntry, Principal};
use http::{Request, Response};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::{Layer, Service};

#[derive(Clone)]
pub struct AuthLayer {
    auth: Arc<Authenticator>,
}

impl AuthLayer {
    pub fn new(auth: Arc<Authenticator>) -> Self {
        Self { auth }
    }
}

impl<S> Layer<S> for AuthLayer {
    type Service = Auth<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Auth {
            inner,
            auth: self.auth.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Auth<S> {
    inner: S,
    auth: Arc<Authenticator>,
}

/// The secret of an `authorization: Bearer <secret>` header.
fn bearer<B>(request: &Request<B>) -> Option<String> {
    let value = request
        .headers()
        .get(http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, secret) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| secret.trim().to_string())
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> Service<Request<B>> for Auth<S>
where
    S: Service<Request<B>, Response = Response<tonic::body::Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        // The clone that was polled ready serves this call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let auth = self.auth.clone();
        Box::pin(async move {
            let path = request.uri().path().to_string();
            let permission = match permissions::required(&path) {
                None => return inner.call(request).await,
                Some(Some(p)) => p,
                Some(None) => {
                    let who = Principal::Anonymous;
                    let denial = Denial {
                        error: ApiError::PermissionDenied {
                            message: format!("{path} is not a method this server allows"),
                            permission: "none".into(),
                            team: String::new(),
                        },
                        audit: AuditEntry::ok(&who, &path, "", "")
                            .with("PERMISSION_DENIED", "not in the permission table"),
                    };
                    return Ok(refuse(&auth, denial).await);
                }
            };
            let method = path.trim_start_matches('/');
            let secret = bearer(&request);
            let peer = request
                .extensions()
                .get::<crate::tls::PeerInfo>()
                .and_then(|p| p.identity.clone());
            match auth
                .authorize(method, permission, secret.as_deref(), peer.as_ref())
                .await
            {
                Ok(principal) => {
                    // A stream held open under a token takes one of its slots.
                    let streaming = matches!(principal, Principal::User { .. })
                        && super::streams::STREAMING.contains(&path.as_str());
                    let slot = match (&secret, streaming) {
                        (Some(secret), true) => match auth.streams.open(secret) {
                            Some(slot) => Some(slot),
                            None => {
                                let denial = super::too_many_streams(&principal, method);
                                return Ok(refuse(&auth, denial).await);
                            }
                        },
                        _ => None,
                    };
                    request.extensions_mut().insert(principal.clone());
                    let mut response = inner.call(request).await?;
                    let target = super::audit_target::take(response.headers_mut());
                    let status = tonic::Status::from_header_map(response.headers());
                    if let Some(status) = status {
                        audit_failure(&auth, &path, principal, status, target).await;
                        return Ok(response);
                    }
                    // A stream held open under a token ends when the token does.
                    match (secret, slot) {
                        (Some(secret), Some(slot)) => Ok(response.map(|body| {
                            tonic::body::Body::new(super::streams::Guarded::new(
                                body, auth, method, secret, slot,
                            ))
                        })),
                        _ => Ok(response),
                    }
                }
                Err(denial) => Ok(refuse(&auth, denial).await),
            }
        })
    }
}

/// The audit row of a call that failed after the layer let it through: a
/// handler's denial (another team's resource, named with its team: see
/// [`super::audit_target`]), or any failed change (a change that succeeds
/// writes its own row in its transaction). Streams that fail later, in
/// their trailers, are reads and not audited. A call the layer itself
/// refuses is audited before its body is read (no untrusted input is
/// decoded before authentication), so its row names the method, not a
/// target.
async fn audit_failure(
    auth: &Authenticator,
    path: &str,
    who: Principal,
    status: tonic::Status,
    (target, target_team): (String, String),
) {
    let code = status.code();
    let mutating = permissions::MUTATING.contains(&path);
    if code == tonic::Code::Ok || !(mutating || code == tonic::Code::PermissionDenied) {
        return;
    }
    let method = path.trim_start_matches('/');
    // What the handler named, and whose it is; else the caller's own team.
    let team = if target.is_empty() {
        who.team().to_string()
    } else {
        target_team
    };
    let entry =
        AuditEntry::ok(&who, method, &target, &team).with(super::code_name(code), status.message());
    auth.record(entry).await;
}

async fn refuse(auth: &Authenticator, denial: Denial) -> Response<tonic::body::Body> {
    tracing::info!(method = %denial.audit.method, code = %denial.audit.code,
        actor = %denial.audit.actor, detail = %denial.audit.detail, "call refused");
    auth.record(denial.audit).await;
    tonic::Status::from(denial.error).into_http()
}
