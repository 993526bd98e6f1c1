//! CordonAgent, UncordonAgent and DrainAgent (cluster-admin, audited): the
//! mark goes to the database (it outlives sessions and coordinators) and to
//! the live fleet (placement reads it at its next pass). Also an agent as
//! ListAgents and these answer it.

use super::super::convert::timestamp;
use super::super::error::ApiError;
use crate::context::Context;
use crate::model::{AgentRecord, AuditEntry, Principal};
use crate::persistence::maintenance::Cordon;
use cohort_proto::v1;
use std::time::Duration;

/// Bytes a cordon's or drain's reason may have.
pub const MAX_REASON: usize = 256;
/// A drain's deadline unless one is given.
pub const DEFAULT_DRAIN_DEADLINE: Duration = Duration::from_secs(600);
/// The longest drain deadline.
pub const MAX_DRAIN_DEADLINE: Duration = Duration::from_secs(7 * 24 * 3600);

const SERVICE: &str = "cohort.v1.AgentService";

/// What an admin asked for.
pub enum Change {
    Cordon {
        reason: String,
    },
    Uncordon,
    Drain {
        reason: String,
        deadline: Option<prost_types::Duration>,
    },
}

fn checked_name(name: &str) -> Result<String, ApiError> {
    let name = name.trim();
    if name.is_empty() {
        return Err(ApiError::field("agent", "required: the agent's name"));
    }
    Ok(name.to_string())
}

fn checked_reason(reason: &str) -> Result<String, ApiError> {
    if reason.len() > MAX_REASON {
        return Err(ApiError::field(
            "reason",
            format!("at most {MAX_REASON} bytes"),
        ));
    }
    Ok(reason.trim().to_string())
}

fn checked_deadline(deadline: Option<prost_types::Duration>) -> Result<Duration, ApiError> {
    let Some(d) = deadline else {
        return Ok(DEFAULT_DRAIN_DEADLINE);
    };
    Duration::try_from(d)
        .ok()
        .filter(|d| *d >= Duration::from_secs(1) && *d <= MAX_DRAIN_DEADLINE)
        .ok_or_else(|| ApiError::field("deadline", "must be between 1 s and 7 days"))
}

/// Applies `change` to the agent named `name` for `who`; the agent after it.
pub async fn apply(
    ctx: &Context,
    who: &Principal,
    name: &str,
    change: Change,
) -> Result<v1::Agent, ApiError> {
    let name = checked_name(name)?;
    let (cordon, method, detail) = match change {
        Change::Cordon { reason } => {
            let reason = checked_reason(&reason)?;
            let detail = format!("cordoned: {reason}");
            (
                Cordon {
                    reason: Some(reason),
                    drain_deadline: None,
                },
                "CordonAgent",
                detail,
            )
        }
        Change::Uncordon => (
            Cordon {
                reason: None,
                drain_deadline: None,
            },
            "UncordonAgent",
            "uncordoned".to_string(),
        ),
        Change::Drain { reason, deadline } => {
            let reason = checked_reason(&reason)?;
            let deadline = checked_deadline(deadline)?;
            let at = chrono::Utc::now() + chrono::Duration::from_std(deadline).unwrap_or_default();
            let detail = format!("draining (deadline {}): {reason}", at.to_rfc3339());
            let reason = if reason.is_empty() {
                "draining".to_string()
            } else {
                reason
            };
            (
                Cordon {
                    reason: Some(reason),
                    drain_deadline: Some(at),
                },
                "DrainAgent",
                detail,
            )
        }
    };
    let audit =
        AuditEntry::ok(who, &format!("{SERVICE}/{method}"), &name, "").with("OK", detail.clone());
    let (reason, drain) = (cordon.reason.clone(), cordon.drain_deadline);
    let agent_id = ctx.db.set_cordon(&name, cordon, audit).await?;
    ctx.fleet.set_cordon(&agent_id, reason, drain);
    // Placement and the drain pass look at it now.
    ctx.jobs.kick();
    tracing::info!(agent = %name, %detail, "agent maintenance changed");
    let record = ctx
        .db
        .agent_named(&name)
        .await?
        .ok_or_else(|| crate::persistence::LogicalError::AgentNotFound(name.clone()))?;
    Ok(agent_message(ctx, record))
}

/// An agent record as the API shows it, with what the live fleet knows.
pub fn agent_message(ctx: &Context, a: AgentRecord) -> v1::Agent {
    let connected = ctx.fleet.is_connected(&a.id);
    let (_, placed) = ctx.fleet.placed_on(&a.id);
    v1::Agent {
        state: if connected {
            v1::AgentState::Connected
        } else {
            v1::AgentState::Disconnected
        } as i32,
        gpus: a.gpus.iter().map(v1::GpuInfo::from).collect(),
        connect_time: Some(timestamp(a.connect_time)),
        last_seen_time: Some(timestamp(a.last_seen_time)),
        last_doctor: a.last_doctor.as_ref().map(super::doctor::to_proto),
        cordon_reason: a
            .cordon_reason
            .as_ref()
            .map(|r| {
                if r.is_empty() {
                    "cordoned".to_string()
                } else {
                    r.clone()
                }
            })
            .unwrap_or_default(),
        draining: a.drain_deadline.is_some(),
        drain_deadline: a.drain_deadline.map(timestamp),
        placed_ranks: i32::try_from(placed).unwrap_or(i32::MAX),
        id: a.id,
        name: a.name,
        host_name: a.host_name,
        address: a.address,
        version: a.version,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_checked() {
        assert!(checked_name("  ").is_err());
        assert_eq!(checked_name(" a1 ").unwrap(), "a1");
        assert!(checked_reason(&"x".repeat(MAX_REASON + 1)).is_err());
        assert_eq!(checked_deadline(None).unwrap(), DEFAULT_DRAIN_DEADLINE);
        let d = |seconds| Some(prost_types::Duration { seconds, nanos: 0 });
        assert_eq!(checked_deadline(d(60)).unwrap(), Duration::from_secs(60));
        assert!(checked_deadline(d(0)).is_err());
        assert!(checked_deadline(d(-1)).is_err());
        assert!(checked_deadline(d(8 * 24 * 3600)).is_err());
    }
}
