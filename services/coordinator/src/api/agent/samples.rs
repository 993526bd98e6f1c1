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
    let mut ingested = session.ctx.fleet.ingest(&session.agent_id, samples);
    for (uuid, why) in std::mem::take(&mut ingested.quarantined) {
        tracing::warn!(agent_id = %session.agent_id, gpu = %uuid, reason = %why,
            "GPU quarantined: no new ranks on it until an admin releases it");
        // Kept across restarts; the fleet already refuses placements on it.
        let db = session.ctx.db.clone();
        tokio::spawn(async move {
            if let Err(e) = db.quarantine_gpu(&uuid, &why).await {
                tracing::warn!(gpu = %uuid, error = %e, "cannot store the GPU's quarantine");
            }
        });
    }
    if let Some(uuid) = ingested.first_refused {
        session.refused(
            "gpu sample",
            &format!("{} sample(s), e.g. GPU {uuid}", ingested.refused),
        );
    }
}
