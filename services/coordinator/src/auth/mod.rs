//! Who may call what: bearer tokens for users, client certificates for
//! agents, one permission per RPC ([`permissions`]), enforced for every
//! call by [`layer::AuthLayer`] before any handler runs. Handlers then
//! scope what they read and change to the caller's team (they find the
//! [`Principal`] in the request's extensions).

pub mod agent_names;
pub mod audit_target;
pub mod bootstrap;
pub mod cache;
pub mod denials;
pub mod flags;
pub mod issue;
pub mod layer;
pub mod permissions;
pub mod secret;
pub mod streams;

use crate::error::ApiError;
use crate::model::{AuditEntry, Principal};
use crate::persistence::Persistence;
use crate::tls::PeerIdentity;
use cache::TokenCache;
use permissions::Permission;
use std::sync::Arc;
use std::time::Instant;
use tonic::Code;

pub use layer::AuthLayer;

/// How users authenticate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// No tokens: every caller is the anonymous cluster-admin (a single
    /// trusted user on loopback).
    None,
    /// Bearer tokens, deny by default.
    Token,
}

/// A refused call: what the client is told and the audit row.
pub struct Denial {
    pub error: ApiError,
    pub audit: AuditEntry,
}

/// How callers are authenticated and how long their traces are kept.
#[derive(Debug, Clone)]
pub struct AuthSettings {
    pub mode: AuthMode,
    /// Agents must present a client certificate (`--agent-ca`).
    pub agent_certs: bool,
    /// The names each agent CA may certify (`--agent-names`).
    pub agent_names: agent_names::AgentNames,
    /// Audit rows older than this are deleted.
    pub audit_retention: std::time::Duration,
}

impl Default for AuthSettings {
    /// `--auth none`, agents without certificates, 90 days of audit.
    fn default() -> Self {
        Self {
            mode: AuthMode::None,
            agent_certs: false,
            agent_names: Default::default(),
            audit_retention: std::time::Duration::from_secs(90 * 86_400),
        }
    }
}

/// How often audit retention runs.
pub const AUDIT_PRUNE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(3600);

/// Deletes audit rows past the retention, at start and then hourly.
pub async fn prune_audit(
    db: Persistence,
    retention: std::time::Duration,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(AUDIT_PRUNE_INTERVAL);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tick.tick() => {
                let Ok(keep) = chrono::Duration::from_std(retention) else { return };
                match db.prune_audit(chrono::Utc::now() - keep).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(rows = n, "audit rows past retention deleted"),
                    Err(e) => tracing::warn!(error = %e, "audit retention failed"),
                }
            }
        }
    }
}

/// The refusal of one stream more than a token may hold open.
fn too_many_streams(who: &Principal, method: &str) -> Denial {
    Denial {
        error: ApiError::TooManyStreams(streams::MAX_PER_TOKEN),
        audit: AuditEntry::ok(who, method, "", who.team())
            .with("RESOURCE_EXHAUSTED", "too many open streams"),
    }
}

/// Writes the folded denial rows of minutes that are over, every 10 s,
/// until `stop`.
pub async fn flush_denials(
    auth: std::sync::Arc<Authenticator>,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(10));
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tick.tick() => auth.flush_denials().await,
        }
    }
}

/// Shared by the layer and the admin handlers.
#[derive(Debug)]
pub struct Authenticator {
    pub mode: AuthMode,
    /// Agents must present a client certificate (`--agent-ca`).
    pub agent_certs: bool,
    /// The names each agent CA may certify (`--agent-names`).
    pub agent_names: agent_names::AgentNames,
    pub audit_retention: std::time::Duration,
    db: Persistence,
    cache: TokenCache,
    denials: denials::Denials,
    /// Streams open per token.
    pub streams: std::sync::Arc<streams::OpenStreams>,
}

/// gRPC's name of a code (`PERMISSION_DENIED`), as the audit log writes it.
pub fn code_name(code: Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}

fn anonymous_entry(method: &str) -> AuditEntry {
    AuditEntry::ok(&Principal::Anonymous, method, "", "")
}

impl Authenticator {
    pub fn new(settings: AuthSettings, db: Persistence) -> Arc<Self> {
        Arc::new(Self {
            mode: settings.mode,
            agent_certs: settings.agent_certs,
            agent_names: settings.agent_names,
            audit_retention: settings.audit_retention,
            db,
            cache: TokenCache::default(),
            denials: denials::Denials::default(),
            streams: Default::default(),
        })
    }

    /// The caller of `method` needing `permission`, or why not.
    pub async fn authorize(
        &self,
        method: &str,
        permission: Permission,
        bearer: Option<&str>,
        peer: Option<&PeerIdentity>,
    ) -> Result<Principal, Denial> {
        if permission == Permission::Agent {
            return match peer {
                Some(PeerIdentity(name)) => Ok(Principal::Agent { name: name.clone() }),
                None if !self.agent_certs => Ok(Principal::Anonymous),
                None => Err(Denial {
                    error: ApiError::Unauthenticated(
                        "agents must present a client certificate signed by the coordinator's agent CA".into(),
                    ),
                    audit: anonymous_entry(method)
                        .with("UNAUTHENTICATED", "agent without a client certificate"),
                }),
            };
        }
        let user = match self.mode {
            AuthMode::None => Principal::Anonymous,
            AuthMode::Token => self.user(method, bearer).await?,
        };
        let role = user.role().expect("users have roles");
        if permission.granted_to(role) {
            return Ok(user);
        }
        Err(Denial {
            error: ApiError::PermissionDenied {
                message: format!(
                    "{method} needs the {} permission; the token's role is {role}",
                    permission.as_str()
                ),
                permission: permission.as_str().to_string(),
                team: user.team().to_string(),
            },
            audit: AuditEntry::ok(&user, method, "", user.team()).with(
                "PERMISSION_DENIED",
                format!("role {role} lacks {}", permission.as_str()),
            ),
        })
    }

    /// The user a bearer token stands for.
    async fn user(&self, method: &str, bearer: Option<&str>) -> Result<Principal, Denial> {
        let unauthenticated = |why: &str| Denial {
            error: ApiError::Unauthenticated(format!(
                "{why}: send `authorization: Bearer <token>`"
            )),
            audit: anonymous_entry(method).with("UNAUTHENTICATED", why),
        };
        let Some(secret) = bearer else {
            return Err(unauthenticated("no bearer token"));
        };
        let hash = secret::hash(secret);
        let now = Instant::now();
        let found = match self.cache.get(&hash, now) {
            Some(found) => found,
            None => {
                let found = self.db.token_by_hash(&hash).await.map_err(|e| Denial {
                    error: ApiError::Unavailable("cannot check the token now".into()),
                    audit: anonymous_entry(method).with("UNAVAILABLE", e.to_string()),
                })?;
                self.cache.put(hash, found.clone(), now);
                found
            }
        };
        match found {
            Some(t) if t.is_active(chrono::Utc::now()) => Ok(Principal::User {
                token_id: t.id,
                name: t.name,
                team: t.team,
                role: t.role,
            }),
            Some(t) => Err(unauthenticated(&format!(
                "token {} of team {} is {}",
                t.name,
                t.team,
                if t.revoke_time.is_some() {
                    "revoked"
                } else {
                    "expired"
                }
            ))),
            None => Err(unauthenticated("unknown token")),
        }
    }

    /// Records a refused call (nothing else changed), or a read worth
    /// auditing (a checkpoint download): the first of its kind in a minute
    /// at once, its repeats folded into one row later ([`denials`]).
    pub async fn record(&self, audit: AuditEntry) {
        let rows = self.denials.count(audit, std::time::Instant::now());
        self.write(rows).await;
    }

    /// Writes the folded rows of minutes that are over.
    pub async fn flush_denials(&self) {
        let rows = self.denials.flush(std::time::Instant::now());
        self.write(rows).await;
    }

    async fn write(&self, rows: Vec<AuditEntry>) {
        for row in rows {
            if let Err(e) = self.db.record_audit(row).await {
                tracing::warn!(error = %e, "cannot write the audit row of a denial");
            }
        }
    }
}
