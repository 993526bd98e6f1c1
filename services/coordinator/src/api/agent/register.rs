//! The start of an agent's `AgentService.Connect` stream: the first message
//! must be a valid Register; the agent is recorded, answered Registered,
//! joins the live fleet, has its running ranks reconciled, and its
//! [`session`](super::session) begins.

use super::session;
use crate::api::error::ApiError;
use crate::context::Context;
use crate::fleet::{AgentCommand, LiveAgent};
use crate::model::GpuRecord;
use crate::persistence::AgentRegistration;
use cohort_proto::v1;
use cohort_proto::v1::agent_message::Message;
use std::collections::HashSet;
use std::time::Duration;

/// The most program roots kept of an agent (of each kind), and the longest.
const MAX_PROGRAM_ROOTS: usize = 64;
const MAX_ROOT_LEN: usize = 4096;

/// The program roots an agent registered, bounded (absolute paths only).
fn program_roots(reg: &v1::Register) -> crate::fleet::AgentProgramRoots {
    let usable = |r: &str| r.starts_with('/') && r.len() <= MAX_ROOT_LEN;
    crate::fleet::AgentProgramRoots {
        shared: reg
            .program_roots
            .iter()
            .filter(|r| usable(r))
            .take(MAX_PROGRAM_ROOTS)
            .cloned()
            .collect(),
        teams: reg
            .team_program_roots
            .iter()
            .filter(|t| usable(&t.root) && !t.team.is_empty() && t.team.len() <= MAX_ROOT_LEN)
            .take(MAX_PROGRAM_ROOTS)
            .map(|t| (t.team.clone(), t.root.clone()))
            .collect(),
    }
}
use tokio::sync::mpsc;
use tokio::time::Instant;
use tonic::{Status, Streaming};

/// How long a new stream may take to send its Register.
pub const REGISTER_TIMEOUT: Duration = Duration::from_secs(10);
/// Commands buffered per agent.
const COMMAND_BUFFER: usize = 256;
/// What the coordinator asks agents to use.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);
pub const TELEMETRY_INTERVAL: Duration = Duration::from_secs(1);

/// The most GPUs one agent may register.
pub const MAX_GPUS: usize = 1024;
/// The most running ranks one Register may list (each is looked up).
pub const MAX_RUNNING_RANKS: usize = 4096;

pub(super) fn validate(reg: &v1::Register) -> Result<Vec<GpuRecord>, Status> {
    if reg.agent_name.trim().is_empty() {
        return Err(ApiError::field("register.agent_name", "required").into());
    }
    if reg.gpus.len() > MAX_GPUS {
        return Err(ApiError::field(
            "register.gpus",
            format!("{} GPUs; at most {MAX_GPUS}", reg.gpus.len()),
        )
        .into());
    }
    if reg.running_ranks.len() > MAX_RUNNING_RANKS {
        return Err(ApiError::field(
            "register.running_ranks",
            format!(
                "{} ranks; at most {MAX_RUNNING_RANKS}",
                reg.running_ranks.len()
            ),
        )
        .into());
    }
    let mut seen = HashSet::new();
    let mut gpus = Vec::with_capacity(reg.gpus.len());
    for (i, g) in reg.gpus.iter().enumerate() {
        if g.uuid.is_empty() {
            return Err(ApiError::field(format!("register.gpus[{i}].uuid"), "required").into());
        }
        if !seen.insert(g.uuid.as_str()) {
            return Err(ApiError::field(
                format!("register.gpus[{i}].uuid"),
                format!("{} is reported twice", g.uuid),
            )
            .into());
        }
        gpus.push(GpuRecord {
            uuid: g.uuid.clone(),
            index: g.index,
            name: g.name.clone(),
            memory_total_bytes: g.memory_total_bytes,
            compute_capability: g.compute_capability.clone(),
            simulated: g.simulated,
            quarantine: None,
        });
    }
    Ok(gpus)
}

/// What goes down an accepted agent's stream: Registered first, then its
/// commands as they come.
pub(super) struct Accepted {
    pub registered: v1::CoordinatorMessage,
    pub commands: mpsc::Receiver<AgentCommand>,
}

/// The name an agent registers must be the identity of its client
/// certificate, when it presented one: else PERMISSION_DENIED
/// (AGENT_IDENTITY_MISMATCH); and one its issuing CA may certify
/// (`--agent-names`): else PERMISSION_DENIED (AGENT_NAME_NOT_ALLOWED).
/// Either is logged and audited, and nothing is recorded.
async fn check_identity(
    ctx: &Context,
    identity: Option<&str>,
    issuer: Option<&str>,
    name: &str,
) -> Result<(), Status> {
    let Some(identity) = identity else {
        return Ok(());
    };
    if identity == name {
        return check_allowed(ctx, identity, issuer).await;
    }
    tracing::warn!(
        certificate = identity,
        registered_as = name,
        "an agent tried to register under another name"
    );
    let who = crate::model::Principal::Agent {
        name: identity.to_string(),
    };
    ctx.auth
        .record(
            crate::model::AuditEntry::ok(&who, "cohort.v1.AgentService/Connect", name, "").with(
                "PERMISSION_DENIED",
                "registered under a name its certificate does not carry",
            ),
        )
        .await;
    Err(ApiError::AgentIdentityMismatch {
        certificate: identity.to_string(),
        agent_name: name.to_string(),
    }
    .into())
}

/// An agent's certified name against its CA's allowlist (`--agent-names`).
async fn check_allowed(ctx: &Context, identity: &str, issuer: Option<&str>) -> Result<(), Status> {
    let names = &ctx.auth.agent_names;
    if names.allows(issuer, identity) {
        return Ok(());
    }
    let issuer = issuer.unwrap_or("");
    let allowed = names.patterns_of(Some(issuer));
    tracing::warn!(
        certificate = identity,
        issuer,
        ?allowed,
        "an agent's CA may not certify its name"
    );
    let who = crate::model::Principal::Agent {
        name: identity.to_string(),
    };
    ctx.auth
        .record(
            crate::model::AuditEntry::ok(&who, "cohort.v1.AgentService/Connect", identity, "")
                .with(
                    "PERMISSION_DENIED",
                    format!("CA {issuer:?} may not certify this agent name"),
                ),
        )
        .await;
    Err(ApiError::AgentNameNotAllowed {
        certificate: identity.to_string(),
        issuer: issuer.to_string(),
        allowed,
    }
    .into())
}

/// Accept a Connect stream: register the agent (as its certificate's
/// `identity`, when it has one) and spawn its session.
pub(super) async fn accept(
    ctx: Context,
    identity: Option<String>,
    issuer: Option<String>,
    mut inbound: Streaming<v1::AgentMessage>,
) -> Result<Accepted, Status> {
    let first = tokio::time::timeout(REGISTER_TIMEOUT, inbound.message())
        .await
        .map_err(|_| ApiError::RegisterTimeout(REGISTER_TIMEOUT))??;
    let Some(v1::AgentMessage {
        message: Some(Message::Register(reg)),
    }) = first
    else {
        return Err(ApiError::field(
            "message",
            "the first message on a Connect stream must be a Register",
        )
        .into());
    };
    let mut gpus = validate(&reg)?;
    check_identity(
        &ctx,
        identity.as_deref(),
        issuer.as_deref(),
        &reg.agent_name,
    )
    .await?;
    let agent_id = ctx
        .db
        .register_agent(AgentRegistration {
            name: reg.agent_name.clone(),
            host_name: reg.host_name.clone(),
            address: reg.address.clone(),
            version: reg.version.clone(),
            gpus: gpus.clone(),
        })
        .await
        .map_err(ApiError::from)?;
    // Its cordon, drain and quarantined GPUs outlive its sessions.
    let marks = ctx
        .db
        .agent_marks(&agent_id)
        .await
        .map_err(ApiError::from)?;
    for gpu in &mut gpus {
        gpu.quarantine = marks.quarantined.get(&gpu.uuid).cloned();
    }
    let (tx, rx) = mpsc::channel(COMMAND_BUFFER);
    let leader_epoch = u64::try_from(ctx.leadership.epoch()).unwrap_or(0);
    let registered = v1::CoordinatorMessage {
        message: Some(v1::coordinator_message::Message::Registered(
            v1::Registered {
                agent_id: agent_id.clone(),
                heartbeat_interval: prost_types::Duration::try_from(HEARTBEAT_INTERVAL).ok(),
                telemetry_interval: prost_types::Duration::try_from(TELEMETRY_INTERVAL).ok(),
                leader_epoch,
                members: None,
            },
        )),
        leader_epoch,
    };
    let session = ctx.fleet.connect(LiveAgent {
        id: agent_id.clone(),
        name: reg.agent_name.clone(),
        host_name: reg.host_name.clone(),
        address: reg.address.clone(),
        gpus,
        program_roots: program_roots(&reg),
        session: 0,
        commands: tx,
        last_seen: Instant::now(),
        cordon: marks.cordon,
        drain_deadline: marks.drain_deadline,
    });
    tracing::info!(agent_id = %agent_id, name = %reg.agent_name, gpus = reg.gpus.len(),
        running_ranks = reg.running_ranks.len(), "agent connected");
    if let Err(e) = ctx
        .jobs
        .reconcile_agent(
            &agent_id,
            &reg.running_ranks
                .iter()
                .map(crate::model::RunningRank::from)
                .collect::<Vec<_>>(),
        )
        .await
    {
        tracing::warn!(agent_id = %agent_id, error = %e, "cannot reconcile the agent's running ranks");
    }
    ctx.jobs.kick();
    tokio::spawn(session::serve(ctx, agent_id, session, inbound));
    Ok(Accepted {
        registered,
        commands: rx,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cohort_proto::error::bad_fields;

    fn register(gpus: usize, ranks: usize) -> v1::Register {
        v1::Register {
            agent_name: "a".into(),
            gpus: (0..gpus)
                .map(|i| v1::GpuInfo {
                    uuid: format!("GPU-{i}"),
                    ..Default::default()
                })
                .collect(),
            running_ranks: vec![v1::RunningRank::default(); ranks],
            ..Default::default()
        }
    }

    #[test]
    fn a_register_is_bounded_and_names_what_is_wrong() {
        assert!(validate(&register(8, 8)).is_ok());
        let e = validate(&register(MAX_GPUS + 1, 0)).unwrap_err();
        assert_eq!(bad_fields(&e), vec!["register.gpus".to_string()]);
        let e = validate(&register(1, MAX_RUNNING_RANKS + 1)).unwrap_err();
        assert_eq!(bad_fields(&e), vec!["register.running_ranks".to_string()]);
        let mut twice = register(2, 0);
        twice.gpus[1].uuid = "GPU-0".into();
        let e = validate(&twice).unwrap_err();
        assert_eq!(bad_fields(&e), vec!["register.gpus[1].uuid".to_string()]);
    }
}
