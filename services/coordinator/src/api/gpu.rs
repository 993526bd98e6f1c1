//! GpuService. ListGpus answers from the live fleet: every GPU of every
//! connected agent, its latest sample and the training rank holding it.
//! Recommendation, validation and memory estimation belong to the GPU
//! selection work (issue 4) and answer UNIMPLEMENTED until then.

use super::Context;
use cohort_proto::v1;
use cohort_proto::v1::gpu_service_server::GpuService;
use tonic::{Request, Response, Status};

#[derive(Debug, Clone)]
pub struct GpuApi {
    ctx: Context,
}

impl GpuApi {
    pub fn new(ctx: Context) -> Self {
        Self { ctx }
    }
}

#[tonic::async_trait]
impl GpuService for GpuApi {
    async fn list_gpus(
        &self,
        request: Request<v1::ListGpusRequest>,
    ) -> Result<Response<v1::ListGpusResponse>, Status> {
        let req = request.into_inner();
        let fleet = &self.ctx.fleet;
        let gpus = fleet
            .all_gpus()
            .into_iter()
            .filter(|(agent, _)| {
                req.agent_id.is_empty() || req.agent_id == agent.id || req.agent_id == agent.name
            })
            .map(|(agent, info)| {
                let hold = fleet.holder(&info.uuid);
                let latest = fleet.latest(&info.uuid);
                let availability = if hold.is_some() {
                    v1::GpuAvailability::Busy
                } else {
                    v1::GpuAvailability::Available
                };
                let mut notes = Vec::new();
                if info.simulated {
                    notes.push("simulated GPU".to_string());
                }
                v1::Gpu {
                    agent_id: agent.id.clone(),
                    agent_name: agent.name.clone(),
                    host_name: agent.host_name.clone(),
                    availability: availability as i32,
                    training_id: hold
                        .as_ref()
                        .map(|h| h.training_id.clone())
                        .unwrap_or_default(),
                    rank: hold.as_ref().map_or(-1, |h| h.rank),
                    health_notes: notes,
                    last_seen_time: latest.as_ref().and_then(|s| s.time),
                    latest_sample: latest,
                    info: Some(info),
                }
            })
            .filter(|g| {
                !req.available_only || g.availability == v1::GpuAvailability::Available as i32
            })
            .collect();
        Ok(Response::new(v1::ListGpusResponse {
            gpus,
            next_page_token: String::new(),
        }))
    }

    async fn recommend_gpus(
        &self,
        _request: Request<v1::RecommendGpusRequest>,
    ) -> Result<Response<v1::RecommendGpusResponse>, Status> {
        Err(Status::unimplemented(
            "RecommendGpus is not implemented yet",
        ))
    }

    async fn validate_gpu_selection(
        &self,
        _request: Request<v1::ValidateGpuSelectionRequest>,
    ) -> Result<Response<v1::ValidateGpuSelectionResponse>, Status> {
        Err(Status::unimplemented(
            "ValidateGpuSelection is not implemented yet",
        ))
    }

    async fn estimate_memory(
        &self,
        _request: Request<v1::EstimateMemoryRequest>,
    ) -> Result<Response<v1::MemoryEstimate>, Status> {
        Err(Status::unimplemented(
            "EstimateMemory is not implemented yet",
        ))
    }
}
