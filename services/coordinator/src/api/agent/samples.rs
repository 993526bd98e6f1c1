//! An agent's telemetry: samples of the GPUs it registered are taken into
//! the fleet; samples naming any other GPU are refused and counted (an agent
//! cannot make another host's GPU look busy, nor grow the fleet's maps).

use super::state::Session;
use cohort_proto::v1;

pub(super) fn on_telemetry(session: &mut Session, telemetry: v1::TelemetrySamples) {
    let received = chrono::Utc::now();
    let samples = telemetry
        .samples
        .into_iter()
        .map(|s| super::convert::gpu_sample(s, received))
        .collect();
    let ingested = session.ctx.fleet.ingest(&session.agent_id, samples);
    if let Some(uuid) = ingested.first_refused {
        session.refused(
            "gpu sample",
            &format!("{} sample(s), e.g. GPU {uuid}", ingested.refused),
        );
    }
}
