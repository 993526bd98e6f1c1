//! RunDoctor: ask a connected agent for its host doctor, wait for the
//! report (bounded by the request's timeout), keep it as the agent's
//! latest, and answer it. Also the conversions of reports both ways.

use super::super::error::ApiError;
use crate::context::Context;
use crate::fleet::{AgentCommand, DoctorBusy};
use crate::model::{AuditEntry, DoctorCheck, DoctorReport, DoctorStatus, Principal};
use cohort_proto::v1;
use std::time::Duration;

/// How long RunDoctor waits unless told otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// The longest a caller may ask it to wait.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(900);

fn timeout_of(request: &v1::RunDoctorRequest) -> Result<Duration, ApiError> {
    let Some(t) = request.timeout else {
        return Ok(DEFAULT_TIMEOUT);
    };
    let wanted = Duration::try_from(t)
        .ok()
        .filter(|d| *d >= Duration::from_secs(1) && *d <= MAX_TIMEOUT);
    wanted.ok_or_else(|| ApiError::field("timeout", "must be between 1 s and 15 min"))
}

/// Runs the doctor on the agent named in `request` for `who`.
pub async fn run(
    ctx: &Context,
    who: &Principal,
    request: v1::RunDoctorRequest,
) -> Result<v1::DoctorReport, ApiError> {
    let name = request.agent.trim().to_string();
    if name.is_empty() {
        return Err(ApiError::field("agent", "required: the agent's name"));
    }
    let timeout = timeout_of(&request)?;
    let Some(agent) = ctx.fleet.agents().into_iter().find(|a| a.name == name) else {
        let known = ctx.db.agent_named(&name).await?.is_some();
        return Err(if known {
            ApiError::DoctorAgentOffline(name)
        } else {
            crate::persistence::LogicalError::AgentNotFound(name).into()
        });
    };
    let (request_id, answer) = ctx.fleet.doctors.start(&agent.id).map_err(|e| match e {
        DoctorBusy::Agent(_) => {
            ApiError::DoctorBusy(format!("a doctor already runs on agent {name}"))
        }
        DoctorBusy::Full => ApiError::DoctorBusy(e.to_string()),
    })?;
    if !ctx
        .fleet
        .send(&agent.id, AgentCommand::RunDoctor { request_id })
    {
        ctx.fleet.doctors.forget(request_id);
        return Err(ApiError::DoctorAgentOffline(name));
    }
    tracing::info!(agent = %name, request_id, timeout_s = timeout.as_secs(), "host doctor asked for");
    let got = tokio::time::timeout(timeout, answer).await;
    ctx.fleet.doctors.forget(request_id);
    let report = match got {
        Err(_) => {
            return Err(ApiError::DoctorTimeout {
                agent: name,
                timeout,
            })
        }
        // The session ended: its waiter was dropped.
        Ok(Err(_)) => return Err(ApiError::DoctorAgentOffline(name)),
        Ok(Ok(Err(reason))) => {
            return Err(ApiError::DoctorFailed {
                agent: name,
                reason,
            })
        }
        Ok(Ok(Ok(report))) => report,
    };
    let method = "cohort.v1.AgentService/RunDoctor";
    let verdict = if report.ok {
        "host doctor: healthy"
    } else {
        "host doctor: not ready"
    };
    let audit = AuditEntry::ok(who, method, &name, "").with("OK", verdict);
    ctx.db.save_doctor(&agent.id, &report, audit).await?;
    tracing::info!(agent = %name, ok = report.ok, "host doctor report kept");
    Ok(to_proto(&report))
}

/// An agent's DoctorResult: handed to the RunDoctor waiting for it.
pub fn on_result(ctx: &Context, agent_id: &str, result: v1::DoctorResult) {
    let agent_name = ctx
        .fleet
        .agent(agent_id)
        .map(|a| a.name)
        .unwrap_or_default();
    let agent_name = agent_name.as_str();
    let answer = match (result.report, result.error) {
        (Some(report), e) if e.is_empty() => Ok(from_proto(agent_name, report)),
        (_, e) if !e.is_empty() => Err(e),
        _ => Err("the agent sent neither a report nor an error".to_string()),
    };
    ctx.fleet
        .doctors
        .complete(agent_id, result.request_id, answer);
}

/// An agent's report, bounded; its agent is the session's, whatever it says.
pub fn from_proto(agent_name: &str, r: v1::DoctorReport) -> DoctorReport {
    let checks: Vec<DoctorCheck> = r
        .checks
        .into_iter()
        .map(|c| DoctorCheck {
            status: match v1::DoctorStatus::try_from(c.status) {
                Ok(v1::DoctorStatus::Pass) => DoctorStatus::Pass,
                Ok(v1::DoctorStatus::Skip) => DoctorStatus::Skip,
                // Unknown verdicts count against the host.
                _ => DoctorStatus::Fail,
            },
            name: c.name,
            value: c.value,
            detail: c.detail,
        })
        .collect();
    let finished_at_ms = r
        .finish_time
        .and_then(|t| {
            chrono::DateTime::from_timestamp(t.seconds, u32::try_from(t.nanos).unwrap_or(0))
        })
        .unwrap_or_else(chrono::Utc::now)
        .timestamp_millis();
    DoctorReport {
        agent: agent_name.to_string(),
        ok: checks.iter().all(|c| c.status != DoctorStatus::Fail),
        checks,
        finished_at_ms,
        duration_ms: r
            .duration
            .and_then(|d| Duration::try_from(d).ok())
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    }
    .bounded()
}

pub fn to_proto(r: &DoctorReport) -> v1::DoctorReport {
    v1::DoctorReport {
        agent: r.agent.clone(),
        checks: r
            .checks
            .iter()
            .map(|c| v1::DoctorCheck {
                name: c.name.clone(),
                status: match c.status {
                    DoctorStatus::Pass => v1::DoctorStatus::Pass,
                    DoctorStatus::Fail => v1::DoctorStatus::Fail,
                    DoctorStatus::Skip => v1::DoctorStatus::Skip,
                } as i32,
                value: c.value.clone(),
                detail: c.detail.clone(),
            })
            .collect(),
        ok: r.ok,
        finish_time: chrono::DateTime::from_timestamp_millis(r.finished_at_ms)
            .map(super::super::convert::timestamp),
        duration: Some(prost_types::Duration {
            seconds: i64::try_from(r.duration_ms / 1000).unwrap_or(i64::MAX),
            nanos: i32::try_from((r.duration_ms % 1000) * 1_000_000).unwrap_or(0),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_round_trip_and_unknown_verdicts_fail() {
        let mut wire = v1::DoctorReport {
            agent: "someone-else".into(),
            checks: vec![
                v1::DoctorCheck {
                    name: "driver".into(),
                    status: v1::DoctorStatus::Skip as i32,
                    value: "2 simulated GPU(s)".into(),
                    detail: "simulated".into(),
                },
                v1::DoctorCheck {
                    name: "all_reduce".into(),
                    status: v1::DoctorStatus::Pass as i32,
                    value: "0.9 GB/s".into(),
                    detail: "gloo".into(),
                },
            ],
            ok: false,
            finish_time: Some(prost_types::Timestamp {
                seconds: 1_700_000_000,
                nanos: 5_000_000,
            }),
            duration: Some(prost_types::Duration {
                seconds: 3,
                nanos: 250_000_000,
            }),
        };
        let report = from_proto("a1", wire.clone());
        assert_eq!(
            report.agent, "a1",
            "the session's agent, not the claimed one"
        );
        assert!(report.ok, "recomputed: no check failed");
        assert_eq!(report.duration_ms, 3250);
        let back = to_proto(&report);
        assert_eq!(back.checks, wire.checks);
        assert_eq!(
            back.finish_time,
            Some(prost_types::Timestamp {
                seconds: 1_700_000_000,
                nanos: 5_000_000
            })
        );
        wire.checks[1].status = 42;
        assert!(!from_proto("a1", wire).ok);
    }

    #[test]
    fn timeouts_are_bounded() {
        let req = |seconds| v1::RunDoctorRequest {
            agent: "a".into(),
            timeout: Some(prost_types::Duration { seconds, nanos: 0 }),
        };
        assert_eq!(timeout_of(&req(60)).unwrap(), Duration::from_secs(60));
        assert!(timeout_of(&req(0)).is_err());
        assert!(timeout_of(&req(901)).is_err());
        assert!(timeout_of(&req(-5)).is_err());
        let unset = v1::RunDoctorRequest {
            agent: "a".into(),
            timeout: None,
        };
        assert_eq!(timeout_of(&unset).unwrap(), DEFAULT_TIMEOUT);
    }
}
