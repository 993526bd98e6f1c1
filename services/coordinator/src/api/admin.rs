//! AdminService: team tokens, quotas, the audit log and who-am-I. The auth
//! layer has checked the call's permission; these handlers scope it to
//! teams (an admin acts on its own team, a cluster-admin on any) and write
//! every change's audit row in the change's transaction.

use super::caller::{caller, ensure_team};
use super::convert::timestamp;
use super::error::ApiError;
use super::page_token::page_size;
use super::page_token::{decode_key, encode_key};
use crate::auth::issue::{issue, TokenRequest};
use crate::context::Context;
use crate::model::{valid_team, AuditEntry, Principal, Role};
use crate::persistence::audit::{AuditQuery, AuditRecord};
use crate::persistence::quotas::TeamQuota;
use crate::persistence::tokens::{Revoked, TokenRecord};
use cohort_proto::error::Reason;
use cohort_proto::v1;
use cohort_proto::v1::admin_service_server::AdminService;
use tonic::{Request, Response, Status};

const SERVICE: &str = "cohort.v1.AdminService";

#[derive(Debug, Clone)]
pub struct AdminApi {
    ctx: Context,
}

impl AdminApi {
    pub fn new(ctx: Context) -> Self {
        Self { ctx }
    }
}

impl From<Role> for v1::Role {
    fn from(r: Role) -> Self {
        match r {
            Role::Viewer => v1::Role::Viewer,
            Role::Editor => v1::Role::Editor,
            Role::Admin => v1::Role::Admin,
            Role::ClusterAdmin => v1::Role::ClusterAdmin,
        }
    }
}

fn role_of(raw: i32) -> Result<Role, Status> {
    match v1::Role::try_from(raw) {
        Ok(v1::Role::Viewer) => Ok(Role::Viewer),
        Ok(v1::Role::Editor) => Ok(Role::Editor),
        Ok(v1::Role::Admin) => Ok(Role::Admin),
        Ok(v1::Role::ClusterAdmin) => Ok(Role::ClusterAdmin),
        _ => Err(ApiError::field(
            "role",
            "required: ROLE_VIEWER, ROLE_EDITOR, ROLE_ADMIN or ROLE_CLUSTER_ADMIN",
        )
        .into()),
    }
}

fn token_message(t: TokenRecord) -> v1::Token {
    v1::Token {
        id: t.id,
        team: t.team,
        name: t.name,
        role: v1::Role::from(t.role) as i32,
        creator: t.creator,
        create_time: Some(timestamp(t.create_time)),
        expire_time: t.expire_time.map(timestamp),
        revoke_time: t.revoke_time.map(timestamp),
    }
}

fn audit_message(r: AuditRecord) -> v1::AuditEvent {
    let e = r.entry;
    v1::AuditEvent {
        id: r.id,
        time: Some(timestamp(r.time)),
        actor_kind: e.actor_kind,
        actor: e.actor,
        actor_team: e.actor_team,
        method: e.method,
        target: e.target,
        target_team: e.target_team,
        code: e.code,
        detail: e.detail,
    }
}

/// A name or team: 1-63 of a-z, 0-9, '-', '_', '.'.
fn checked(field: &str, value: &str) -> Result<(), Status> {
    if valid_team(value) {
        return Ok(());
    }
    Err(ApiError::field(field, "1 to 63 of a-z, 0-9, '-', '_', '.'").into())
}

/// The team a request names (its own when empty), if `who` may act on it.
fn team_of(who: &Principal, requested: &str) -> Result<String, Status> {
    let team = if requested.is_empty() {
        who.team().to_string()
    } else {
        requested.to_string()
    };
    checked("team", &team)?;
    ensure_team(who, &team, &format!("team {team}"))?;
    Ok(team)
}

/// For a cluster-admin naming no team: every team (`None`); else the team
/// as [`team_of`] gives it.
fn every_team_or(who: &Principal, requested: &str) -> Result<Option<String>, Status> {
    if requested.is_empty() && who.is_cluster_admin() {
        return Ok(None);
    }
    team_of(who, requested).map(Some)
}

#[tonic::async_trait]
impl AdminService for AdminApi {
    async fn create_token(
        &self,
        request: Request<v1::CreateTokenRequest>,
    ) -> Result<Response<v1::CreateTokenResponse>, Status> {
        let who = caller(&self.ctx, &request)?;
        let req = request.into_inner();
        let team = team_of(&who, &req.team)?;
        checked("name", &req.name)?;
        let role = role_of(req.role)?;
        if Some(role) > who.role() {
            return Err(ApiError::PermissionDenied {
                message: format!("a token cannot mint a role above its own ({role})"),
                permission: role.as_str().to_string(),
                team: who.team().to_string(),
            }
            .into());
        }
        let ttl = match req.ttl {
            None => None,
            Some(ttl) => Some(
                std::time::Duration::try_from(ttl)
                    .map_err(|_| ApiError::field("ttl", "must be > 0"))?,
            ),
        };
        let method = format!("{SERVICE}/CreateToken");
        let (token, secret) = issue(
            &self.ctx.db,
            TokenRequest {
                team: team.clone(),
                name: req.name.clone(),
                role,
                ttl,
                creator: who.actor().1,
                audit: AuditEntry::ok(&who, &method, &req.name, &team),
            },
        )
        .await
        .map_err(ApiError::from)?;
        Ok(Response::new(v1::CreateTokenResponse {
            token: Some(token_message(token)),
            secret,
        }))
    }

    async fn list_tokens(
        &self,
        request: Request<v1::ListTokensRequest>,
    ) -> Result<Response<v1::ListTokensResponse>, Status> {
        let who = caller(&self.ctx, &request)?;
        let req = request.into_inner();
        let team = team_of(&who, &req.team)?;
        let limit = page_size(req.page_size)?;
        let after = decode_key("k1", &req.page_token)?.unwrap_or_default();
        let mut tokens = self
            .ctx
            .db
            .tokens(&team, &after, limit + 1)
            .await
            .map_err(ApiError::from)?;
        let more = tokens.len() as i64 > limit;
        tokens.truncate(limit as usize);
        let next_page_token = match tokens.last() {
            Some(last) if more => encode_key("k1", &last.name),
            _ => String::new(),
        };
        Ok(Response::new(v1::ListTokensResponse {
            tokens: tokens.into_iter().map(token_message).collect(),
            next_page_token,
        }))
    }

    async fn revoke_token(
        &self,
        request: Request<v1::RevokeTokenRequest>,
    ) -> Result<Response<v1::Token>, Status> {
        let who = caller(&self.ctx, &request)?;
        let req = request.into_inner();
        let team = team_of(&who, &req.team)?;
        checked("name", &req.name)?;
        let method = format!("{SERVICE}/RevokeToken");
        let audit = AuditEntry::ok(&who, &method, &req.name, &team);
        // A team admin revokes tokens up to its own role, never a
        // cluster-admin's that happens to carry its team.
        let up_to = who.role().unwrap_or(Role::ClusterAdmin);
        let revoked = self
            .ctx
            .db
            .revoke_token(&team, &req.name, up_to, Some(audit))
            .await
            .map_err(ApiError::from)?;
        let token = match revoked {
            Revoked::Done(token) => token,
            Revoked::NotFound => {
                return Err(ApiError::TokenNotFound {
                    team: team.clone(),
                    name: req.name.clone(),
                }
                .into())
            }
            Revoked::Outranks(role) => {
                return Err(ApiError::PermissionDenied {
                    message: format!(
                        "token {team}/{} has role {role}, above the caller's ({up_to}): only a cluster-admin revokes it",
                        req.name
                    ),
                    permission: "team-admin".into(),
                    team: team.clone(),
                }
                .into())
            }
        };
        tracing::info!(team = %token.team, name = %token.name, "token revoked");
        Ok(Response::new(token_message(token)))
    }

    async fn set_quota(
        &self,
        request: Request<v1::SetQuotaRequest>,
    ) -> Result<Response<v1::TeamQuota>, Status> {
        let who = caller(&self.ctx, &request)?;
        let req = request.into_inner();
        checked("team", &req.team)?;
        for (field, value) in [
            ("gpus", req.gpus),
            ("max_queued", req.max_queued),
            ("borrow_limit", req.borrow_limit),
        ] {
            if value.is_some_and(|v| v < 0) {
                return Err(ApiError::field(field, "must be >= 0").into());
            }
        }
        if req
            .weight
            .is_some_and(|w| !(w.is_finite() && w > 0.0 && w <= 1e6))
        {
            return Err(ApiError::field("weight", "must be in (0, 1000000]").into());
        }
        let classes = &self.ctx.jobs.settings().classes;
        if let Some(class) = &req.max_priority_class {
            if classes.get(class).is_none() {
                return Err(ApiError::field(
                    "max_priority_class",
                    format!(
                        "no priority class {class:?}; the classes are {}",
                        classes.names()
                    ),
                )
                .into());
            }
        }
        let method = format!("{SERVICE}/SetQuota");
        let detail = format!(
            "gpus {:?}, max_queued {:?}, borrow_limit {:?}, weight {:?}, max_priority_class {:?}",
            req.gpus, req.max_queued, req.borrow_limit, req.weight, req.max_priority_class
        );
        let quota = self
            .ctx
            .db
            .set_quota(
                TeamQuota {
                    team: req.team.clone(),
                    gpus: req.gpus,
                    max_queued: req.max_queued,
                    borrow_limit: req.borrow_limit,
                    weight: req.weight,
                    max_priority_class: req.max_priority_class,
                },
                Some(AuditEntry::ok(&who, &method, &req.team, &req.team).with("OK", detail)),
            )
            .await
            .map_err(ApiError::from)?;
        self.ctx.jobs.quota_changed();
        self.ctx.jobs.kick();
        Ok(Response::new(v1::TeamQuota {
            team: quota.team,
            gpus: quota.gpus,
            max_queued: quota.max_queued,
            borrow_limit: quota.borrow_limit,
            weight: quota.weight,
            max_priority_class: quota.max_priority_class,
            ..Default::default()
        }))
    }

    async fn list_quotas(
        &self,
        request: Request<v1::ListQuotasRequest>,
    ) -> Result<Response<v1::ListQuotasResponse>, Status> {
        let who = caller(&self.ctx, &request)?;
        let teams = self.ctx.jobs.team_shares().await.map_err(ApiError::from)?;
        let quotas = teams
            .into_iter()
            .filter(|t| who.sees_team(&t.team))
            .map(|t| {
                let q = t.quota.unwrap_or_default();
                let count = |n: i64| i32::try_from(n).unwrap_or(i32::MAX);
                v1::TeamQuota {
                    gpus: q.gpus,
                    max_queued: q.max_queued,
                    borrow_limit: q.borrow_limit,
                    weight: q.weight,
                    max_priority_class: q.max_priority_class,
                    gpus_in_use: count(t.gpus),
                    queued: count(t.queued),
                    gpus_borrowed: count(t.borrowed),
                    gpus_lent: count(t.lent),
                    decayed_gpu_hours: t.decayed_gpu_seconds / 3600.0,
                    team: t.team,
                }
            })
            .collect();
        Ok(Response::new(v1::ListQuotasResponse { quotas }))
    }

    async fn list_audit_events(
        &self,
        request: Request<v1::ListAuditEventsRequest>,
    ) -> Result<Response<v1::ListAuditEventsResponse>, Status> {
        let who = caller(&self.ctx, &request)?;
        let req = request.into_inner();
        let team = match (who.is_cluster_admin(), req.team.is_empty()) {
            (true, true) => None,
            _ => Some(team_of(&who, &req.team)?),
        };
        let limit = page_size(req.page_size)?;
        let before_id = decode_key("a1", &req.page_token)?
            .map(|id| {
                id.parse::<i64>().map_err(|_| {
                    ApiError::field_with(
                        Reason::InvalidPageToken,
                        "page_token",
                        "not a token this server issued",
                    )
                })
            })
            .transpose()?;
        let since = req.since.and_then(|t| {
            chrono::DateTime::from_timestamp(t.seconds, t.nanos.clamp(0, 999_999_999) as u32)
        });
        let mut events = self
            .ctx
            .db
            .audit_events(AuditQuery {
                team,
                since,
                before_id,
                limit: limit + 1,
            })
            .await
            .map_err(ApiError::from)?;
        let more = events.len() as i64 > limit;
        events.truncate(limit as usize);
        let next_page_token = match events.last() {
            Some(last) if more => encode_key("a1", &last.id.to_string()),
            _ => String::new(),
        };
        Ok(Response::new(v1::ListAuditEventsResponse {
            events: events.into_iter().map(audit_message).collect(),
            next_page_token,
        }))
    }

    async fn forget_agent(
        &self,
        request: Request<v1::ForgetAgentRequest>,
    ) -> Result<Response<v1::ForgetAgentResponse>, Status> {
        let who = caller(&self.ctx, &request)?;
        let name = request.into_inner().name;
        if name.trim().is_empty() {
            return Err(ApiError::field("name", "required").into());
        }
        if self.ctx.fleet.agents().iter().any(|a| a.name == name) {
            return Err(ApiError::from(crate::persistence::LogicalError::AgentBusy {
                name,
                why: "is connected".into(),
            })
            .into());
        }
        let method = format!("{SERVICE}/ForgetAgent");
        let audit = AuditEntry::ok(&who, &method, &name, "").with("OK", "agent forgotten");
        let agent_id = self
            .ctx
            .db
            .forget_agent(&name, audit)
            .await
            .map_err(ApiError::from)?;
        tracing::info!(agent = %name, agent_id = %agent_id, "agent forgotten: its GPUs may be registered by another agent");
        Ok(Response::new(v1::ForgetAgentResponse { agent_id }))
    }

    async fn who_am_i(
        &self,
        request: Request<v1::WhoAmIRequest>,
    ) -> Result<Response<v1::WhoAmIResponse>, Status> {
        let who = caller(&self.ctx, &request)?;
        let (kind, name, team) = who.actor();
        Ok(Response::new(v1::WhoAmIResponse {
            kind: kind.to_string(),
            name,
            team,
            role: who.role().map_or(v1::Role::Unspecified, v1::Role::from) as i32,
        }))
    }

    async fn add_webhook(
        &self,
        request: Request<v1::AddWebhookRequest>,
    ) -> Result<Response<v1::AddWebhookResponse>, Status> {
        let who = caller(&self.ctx, &request)?;
        let req = request.into_inner();
        let team = team_of(&who, &req.team)?;
        super::webhooks::add(&self.ctx, &who, team, req)
            .await
            .map(Response::new)
    }

    async fn list_webhooks(
        &self,
        request: Request<v1::ListWebhooksRequest>,
    ) -> Result<Response<v1::ListWebhooksResponse>, Status> {
        let who = caller(&self.ctx, &request)?;
        let req = request.into_inner();
        let team = every_team_or(&who, &req.team)?;
        super::webhooks::list(&self.ctx, team.as_deref())
            .await
            .map(Response::new)
    }

    async fn remove_webhook(
        &self,
        request: Request<v1::RemoveWebhookRequest>,
    ) -> Result<Response<v1::Webhook>, Status> {
        let who = caller(&self.ctx, &request)?;
        let req = request.into_inner();
        let team = every_team_or(&who, &req.team)?;
        super::webhooks::remove(&self.ctx, &who, team.as_deref(), &req.id)
            .await
            .map(Response::new)
    }
}
