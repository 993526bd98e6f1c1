//! The coordinator's RunDoctor on the agent's stream: the doctor runs off
//! the session loop (it takes seconds to minutes), one at a time, leaving
//! the GPUs that run ranks alone, and its report goes back as a
//! DoctorResult of the same request id.

use crate::doctor::{self, DoctorSetup, Report, Status};
use cohort_proto::v1;
use cohort_proto::v1::agent_message::Message as Out;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime};
use tokio::sync::mpsc;

/// Runs the doctor and sends its report; a second request while one runs
/// is answered at once with an error.
pub(super) fn answer(
    request_id: u64,
    setup: DoctorSetup,
    busy: Vec<u32>,
    running: Arc<AtomicBool>,
    tx: mpsc::Sender<v1::AgentMessage>,
) {
    tokio::spawn(async move {
        let result = if running.swap(true, Ordering::SeqCst) {
            v1::DoctorResult {
                request_id,
                report: None,
                error: "a doctor is already running on this agent".into(),
            }
        } else {
            tracing::info!(request_id, busy = ?busy, "running the host doctor for the coordinator");
            let started = Instant::now();
            let report = doctor::run(&setup, &busy).await;
            running.store(false, Ordering::SeqCst);
            v1::DoctorResult {
                request_id,
                report: Some(to_proto(&setup.agent_name, &report, started)),
                error: String::new(),
            }
        };
        let message = v1::AgentMessage {
            message: Some(Out::DoctorResult(result)),
        };
        if tx.send(message).await.is_err() {
            tracing::warn!(
                request_id,
                "the session ended before the doctor's report could be sent"
            );
        }
    });
}

fn to_proto(agent: &str, report: &Report, started: Instant) -> v1::DoctorReport {
    v1::DoctorReport {
        agent: agent.to_string(),
        checks: report
            .checks
            .iter()
            .map(|c| v1::DoctorCheck {
                name: c.name.clone(),
                status: match c.status {
                    Status::Pass => v1::DoctorStatus::Pass,
                    Status::Fail => v1::DoctorStatus::Fail,
                    Status::Skip => v1::DoctorStatus::Skip,
                } as i32,
                value: c.value.clone(),
                detail: c.detail.clone(),
            })
            .collect(),
        ok: report.ok,
        finish_time: Some(super::convert::timestamp(SystemTime::now())),
        duration: prost_types::Duration::try_from(started.elapsed()).ok(),
    }
}
