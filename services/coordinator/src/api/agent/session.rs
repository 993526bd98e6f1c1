//! One registered agent's session: its messages are read until the stream
//! ends, each handed to its handler ([`samples`](super::samples) for
//! telemetry, [`rank_events`](super::rank_events) for its ranks, the relay
//! for file chunks); then the agent leaves the live fleet.

use super::state::{Delivery, OwnedRanks, Session};
use crate::context::Context;
use crate::fleet::AgentCommand;
use cohort_proto::v1;
use cohort_proto::v1::agent_message::Message;
use tonic::Streaming;

/// Reads the agent's messages until the stream ends.
pub(super) async fn serve(
    ctx: Context,
    agent_id: String,
    session_number: u64,
    mut inbound: Streaming<v1::AgentMessage>,
) {
    let mut session = Session {
        ctx,
        agent_id,
        owned: OwnedRanks::default(),
        warned: false,
    };
    loop {
        let message = match inbound.message().await {
            Ok(Some(m)) => m,
            Ok(None) => break,
            Err(status) => {
                tracing::info!(agent_id = %session.agent_id, error = %status, "agent stream broke");
                break;
            }
        };
        session.ctx.fleet.touch(&session.agent_id);
        match message.message {
            Some(Message::Heartbeat(_)) | None => {}
            Some(Message::Telemetry(t)) => super::samples::on_telemetry(&mut session, t),
            Some(Message::RankEvent(event)) => {
                let delivery = event.delivery;
                match super::rank_events::on_rank_event(&mut session, event).await {
                    Delivery::Done if delivery > 0 => {
                        // Not waited for: a later ack covers a dropped one.
                        let ack = AgentCommand::Ack { through: delivery };
                        session.ctx.fleet.send(&session.agent_id, ack);
                    }
                    Delivery::Done => {}
                    Delivery::Retry => {
                        // The agent keeps what was not acknowledged and sends
                        // it again in its next session (to the leader).
                        tracing::warn!(agent_id = %session.agent_id, "ending the agent's session: its events cannot be stored here");
                        break;
                    }
                }
            }
            Some(Message::FileChunk(data)) => session
                .ctx
                .fleet
                .relay
                .complete(&session.agent_id, data.into()),
            Some(Message::DoctorResult(result)) => {
                super::doctor::on_result(&session.ctx, &session.agent_id, result)
            }
            Some(Message::Register(_)) => {
                tracing::warn!(agent_id = %session.agent_id, "ignoring a second Register on one stream");
            }
        }
    }
    let Session { ctx, agent_id, .. } = session;
    if ctx.fleet.disconnect(&agent_id, session_number) {
        tracing::info!(agent_id = %agent_id, "agent disconnected");
        if let Err(e) = ctx.db.agent_disconnected(&agent_id).await {
            tracing::warn!(agent_id = %agent_id, error = %e, "cannot record the disconnect");
        }
    }
}
