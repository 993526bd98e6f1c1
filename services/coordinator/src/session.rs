//! One agent's `AgentService.Connect` stream: the first message must be a
//! Register; the coordinator answers Registered and from then on reads
//! heartbeats, telemetry and rank events while commands flow back on the same
//! stream. When the stream ends the agent leaves the live fleet.

use crate::fleet::{Fleet, LiveAgent};
use crate::jobs::Jobs;
use crate::model::GpuRecord;
use crate::persistence::{AgentRegistration, Persistence};
use cohort_proto::error::{bad_field, reason};
use cohort_proto::v1;
use cohort_proto::v1::agent_message::Message;
use std::collections::HashSet;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tonic::{Status, Streaming};

/// How long a new stream may take to send its Register.
pub const REGISTER_TIMEOUT: Duration = Duration::from_secs(10);
/// Commands buffered per agent.
const COMMAND_BUFFER: usize = 256;
/// What the coordinator asks agents to use.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);
pub const TELEMETRY_INTERVAL: Duration = Duration::from_secs(1);

fn validate(reg: &v1::Register) -> Result<Vec<GpuRecord>, Status> {
    if reg.agent_name.trim().is_empty() {
        return Err(bad_field(
            reason::INVALID_ARGUMENT,
            "register.agent_name",
            "required",
        ));
    }
    let mut seen = HashSet::new();
    let mut gpus = Vec::with_capacity(reg.gpus.len());
    for (i, g) in reg.gpus.iter().enumerate() {
        if g.uuid.is_empty() {
            return Err(bad_field(
                reason::INVALID_ARGUMENT,
                &format!("register.gpus[{i}].uuid"),
                "required",
            ));
        }
        if !seen.insert(g.uuid.as_str()) {
            return Err(bad_field(
                reason::INVALID_ARGUMENT,
                &format!("register.gpus[{i}].uuid"),
                format!("{} is reported twice", g.uuid),
            ));
        }
        gpus.push(GpuRecord {
            uuid: g.uuid.clone(),
            index: g.index,
            name: g.name.clone(),
            memory_total_bytes: i64::try_from(g.memory_total_bytes).unwrap_or(i64::MAX),
            compute_capability: g.compute_capability.clone(),
            simulated: g.simulated,
        });
    }
    Ok(gpus)
}

/// Accept a Connect stream: register the agent and spawn its session.
/// Returns the receiving end of the agent's command channel.
pub async fn accept(
    db: Persistence,
    fleet: Fleet,
    jobs: Jobs,
    mut inbound: Streaming<v1::AgentMessage>,
) -> Result<mpsc::Receiver<v1::CoordinatorMessage>, Status> {
    let first = tokio::time::timeout(REGISTER_TIMEOUT, inbound.message())
        .await
        .map_err(|_| Status::deadline_exceeded("no Register within 10 s of connecting"))??;
    let Some(v1::AgentMessage {
        message: Some(Message::Register(reg)),
    }) = first
    else {
        return Err(bad_field(
            reason::INVALID_ARGUMENT,
            "message",
            "the first message on a Connect stream must be a Register",
        ));
    };
    let gpus = validate(&reg)?;
    let agent_id = db
        .register_agent(AgentRegistration {
            name: reg.agent_name.clone(),
            host_name: reg.host_name.clone(),
            address: reg.address.clone(),
            version: reg.version.clone(),
            gpus,
        })
        .await
        .map_err(|e| crate::api::status::from_db("register_agent", e))?;
    let (tx, rx) = mpsc::channel(COMMAND_BUFFER);
    let registered = v1::CoordinatorMessage {
        message: Some(v1::coordinator_message::Message::Registered(
            v1::Registered {
                agent_id: agent_id.clone(),
                heartbeat_interval: prost_types::Duration::try_from(HEARTBEAT_INTERVAL).ok(),
                telemetry_interval: prost_types::Duration::try_from(TELEMETRY_INTERVAL).ok(),
            },
        )),
    };
    tx.try_send(registered).expect("fresh channel has room");
    let session = fleet.connect(LiveAgent {
        id: agent_id.clone(),
        name: reg.agent_name.clone(),
        host_name: reg.host_name.clone(),
        address: reg.address.clone(),
        gpus: reg.gpus.clone(),
        session: 0,
        commands: tx,
        last_seen: Instant::now(),
    });
    tracing::info!(agent_id = %agent_id, name = %reg.agent_name, gpus = reg.gpus.len(),
        running_ranks = reg.running_ranks.len(), "agent connected");
    if let Err(e) = jobs.reconcile_agent(&agent_id, &reg.running_ranks).await {
        tracing::warn!(agent_id = %agent_id, error = %e, "cannot reconcile the agent's running ranks");
    }
    jobs.kick();
    tokio::spawn(serve(db, fleet, jobs, agent_id, session, inbound));
    Ok(rx)
}

/// Read the agent's messages until the stream ends.
async fn serve(
    db: Persistence,
    fleet: Fleet,
    jobs: Jobs,
    agent_id: String,
    session: u64,
    mut inbound: Streaming<v1::AgentMessage>,
) {
    loop {
        let message = match inbound.message().await {
            Ok(Some(m)) => m,
            Ok(None) => break,
            Err(status) => {
                tracing::info!(agent_id = %agent_id, error = %status, "agent stream broke");
                break;
            }
        };
        fleet.touch(&agent_id);
        match message.message {
            Some(Message::Heartbeat(_)) | None => {}
            Some(Message::Telemetry(t)) => fleet.ingest(&agent_id, t.samples),
            Some(Message::RankEvent(event)) => {
                let (training_id, rank) = (event.training_id.clone(), event.rank);
                if let Err(e) = jobs.on_rank_event(&agent_id, event).await {
                    tracing::warn!(agent_id = %agent_id, training_id = %training_id, rank, error = %e, "cannot record a rank event");
                }
            }
            Some(Message::FileChunk(data)) => fleet.relay.complete(&agent_id, data),
            Some(Message::Register(_)) => {
                tracing::warn!(agent_id = %agent_id, "ignoring a second Register on one stream");
            }
        }
    }
    if fleet.disconnect(&agent_id, session) {
        tracing::info!(agent_id = %agent_id, "agent disconnected");
        if let Err(e) = db.agent_disconnected(&agent_id).await {
            tracing::warn!(agent_id = %agent_id, error = %e, "cannot record the disconnect");
        }
    }
}
