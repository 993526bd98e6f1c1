//! GpuService. Every RPC answers from the live fleet: ListGpus lists every GPU
//! of every connected agent with its latest sample, holder and availability;
//! RecommendGpus, ValidateGpuSelection and EstimateMemory apply the pure
//! functions of [`crate::selection`] to a snapshot of it.

use super::caller::caller;
use super::error::ApiError;
use crate::context::Context;
use crate::model::Principal;
use crate::selection::{self, Candidate, MemoryEstimate};
use cohort_proto::error::Reason;
use cohort_proto::v1;
use cohort_proto::v1::gpu_service_server::GpuService;
use cohort_spec::Workload;
use tonic::{Request, Response, Status};

/// Most GPUs one RecommendGpus may ask for.
const MAX_COUNT: i32 = 4096;

#[derive(Debug, Clone)]
pub struct GpuApi {
    ctx: Context,
}

impl GpuApi {
    pub fn new(ctx: Context) -> Self {
        Self { ctx }
    }

    /// Every connected GPU as selection sees it, with its proto form, as
    /// `who` may see it: every GPU, but another team's training holding one
    /// is not named (unless `who` is a cluster-admin).
    fn snapshot(&self, who: &Principal) -> Vec<(Candidate, v1::Gpu)> {
        // Copied under one look at the fleet; the rest is done outside it.
        let gpus = self.ctx.fleet.map_gpus(|agent, info, hold, latest| {
            (agent.clone(), info.clone(), hold.cloned(), latest.cloned())
        });
        gpus.into_iter()
            .map(|(agent, info, hold, latest)| {
                let hold = hold.map(|h| {
                    if who.sees_team(&h.team) {
                        h
                    } else {
                        h.redacted()
                    }
                });
                let candidate = Candidate::new(&agent, &info, hold.clone(), latest.as_ref());
                let availability = match candidate.unsuitable(0) {
                    None => v1::GpuAvailability::Available,
                    Some(selection::Unsuitable::Offline) => v1::GpuAvailability::Offline,
                    Some(selection::Unsuitable::Cordoned(_)) => v1::GpuAvailability::Cordoned,
                    Some(selection::Unsuitable::Unhealthy(_)) if info.quarantine.is_some() => {
                        v1::GpuAvailability::Quarantined
                    }
                    Some(selection::Unsuitable::Unhealthy(_)) => v1::GpuAvailability::Unhealthy,
                    Some(_) => v1::GpuAvailability::Busy,
                };
                let mut notes = candidate.faults.clone();
                if let Some(why) = &candidate.cordoned {
                    notes.push(format!("agent cordoned: {why}"));
                }
                notes.extend(
                    candidate
                        .foreign
                        .iter()
                        .map(|(pid, name)| selection::candidate::foreign_note(*pid, name)),
                );
                if let Some(h) = hold.as_ref() {
                    if self.ctx.jobs.stragglers(&h.training_id).contains(&h.rank) {
                        notes.push(format!(
                            "straggler: rank {} of {} computes over 1.5x slower than its peers",
                            h.rank, h.training_id
                        ));
                    }
                }
                if info.simulated {
                    notes.push("simulated GPU".to_string());
                }
                let gpu = v1::Gpu {
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
                    last_seen_time: latest
                        .as_ref()
                        .map(|s| crate::api::convert::timestamp(s.time)),
                    latest_sample: latest.as_ref().map(v1::GpuSample::from),
                    info: Some(v1::GpuInfo::from(&info)),
                    quarantine_reason: info.quarantine.clone().unwrap_or_default(),
                };
                (candidate, gpu)
            })
            .collect()
    }
}

/// A request's config, checked as CreateTraining checks it.
fn parse_config(config: v1::TrainingConfig) -> Result<Workload, Status> {
    Workload::try_from(config).map_err(|e| ApiError::from(e).into())
}

/// The SAE's estimate from its shapes; a program's is what it declares
/// (`memory_gib_per_rank`), all of it overhead to us.
fn estimate_of(config: &Workload) -> MemoryEstimate {
    match config {
        Workload::Sae(sae) => selection::estimate(&selection::EstimateInput::from_config(sae)),
        Workload::Program(p) => {
            let bytes = p.memory_bytes_per_rank();
            MemoryEstimate {
                parameter_count: 0,
                parameters: 0,
                gradients: 0,
                optimizer: 0,
                activations: 0,
                data: 0,
                overhead: bytes,
                total: bytes,
            }
        }
    }
}

fn estimate_proto(e: &MemoryEstimate) -> v1::MemoryEstimate {
    v1::MemoryEstimate {
        parameter_count: i64::try_from(e.parameter_count).unwrap_or(i64::MAX),
        parameters_bytes: e.parameters,
        gradients_bytes: e.gradients,
        optimizer_bytes: e.optimizer,
        activations_bytes: e.activations,
        data_bytes: e.data,
        overhead_bytes: e.overhead,
        total_bytes: e.total,
    }
}

/// (per-rank batch, global batch) for `gpus` ranks; zeros without a config.
fn batches(config: Option<&Workload>, gpus: usize) -> (i64, i64) {
    config.and_then(Workload::sae).map_or((0, 0), |c| {
        let per_rank = c.optim.batch_size;
        (per_rank, per_rank.saturating_mul(gpus as i64))
    })
}

#[tonic::async_trait]
impl GpuService for GpuApi {
    async fn list_gpus(
        &self,
        request: Request<v1::ListGpusRequest>,
    ) -> Result<Response<v1::ListGpusResponse>, Status> {
        let who = caller(&self.ctx, &request)?;
        let req = request.into_inner();
        let mut gpus: Vec<v1::Gpu> = self
            .snapshot(&who)
            .into_iter()
            .map(|(_, gpu)| gpu)
            .collect();
        // GPUs of agents that are gone: known, OFFLINE, never placed on.
        let agents = self.ctx.db.list_agents().await.map_err(ApiError::from)?;
        for agent in agents
            .iter()
            .filter(|a| !self.ctx.fleet.is_connected(&a.id))
        {
            for g in &agent.gpus {
                gpus.push(v1::Gpu {
                    info: Some(v1::GpuInfo::from(g)),
                    agent_id: agent.id.clone(),
                    agent_name: agent.name.clone(),
                    host_name: agent.host_name.clone(),
                    availability: v1::GpuAvailability::Offline as i32,
                    rank: -1,
                    health_notes: vec![format!(
                        "agent disconnected (last seen {})",
                        agent.last_seen_time.format("%Y-%m-%dT%H:%M:%SZ")
                    )],
                    last_seen_time: Some(crate::api::convert::timestamp(agent.last_seen_time)),
                    ..Default::default()
                });
            }
        }
        let gpus = gpus
            .into_iter()
            .filter(|g| {
                req.agent_id.is_empty()
                    || req.agent_id == g.agent_id
                    || req.agent_id == g.agent_name
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
        request: Request<v1::RecommendGpusRequest>,
    ) -> Result<Response<v1::RecommendGpusResponse>, Status> {
        let who = caller(&self.ctx, &request)?;
        let req = request.into_inner();
        if !(0..=MAX_COUNT).contains(&req.count) {
            return Err(ApiError::field("count", format!("must be in 0..={MAX_COUNT}")).into());
        }
        // The config's estimate is computed once: it is the need and is returned.
        let (need, config, estimate) = match req.need {
            Some(v1::recommend_gpus_request::Need::MemoryBytes(bytes)) => (bytes, None, None),
            Some(v1::recommend_gpus_request::Need::Config(config)) => {
                let config = parse_config(config)?;
                let estimate = estimate_of(&config);
                (estimate.total, Some(config), Some(estimate))
            }
            None => return Err(ApiError::field("need", "give config or memory_bytes").into()),
        };
        let (candidates, mut protos): (Vec<Candidate>, Vec<v1::Gpu>) =
            self.snapshot(&who).into_iter().unzip();
        let chosen = selection::recommend(&candidates, need, req.count as usize, req.single_host);
        let gpus: Vec<v1::Gpu> = chosen
            .chosen
            .iter()
            .filter_map(|c| {
                let at = protos
                    .iter()
                    .position(|g| g.info.as_ref().is_some_and(|i| i.uuid == c.uuid))?;
                Some(protos.swap_remove(at))
            })
            .collect();
        let rejected = chosen
            .rejected
            .iter()
            .map(|(c, why)| v1::GpuSelectionProblem {
                gpu_id: c.uuid.clone(),
                reason: why.reason().to_string(),
                message: format!("{} GPU {}: {}", c.agent_name, c.index, why.message()),
            })
            .collect();
        let (per_rank, global) = batches(config.as_ref(), gpus.len());
        tracing::debug!(
            need,
            count = req.count,
            chosen = gpus.len(),
            "recommended GPUs"
        );
        Ok(Response::new(v1::RecommendGpusResponse {
            estimate: estimate.as_ref().map(estimate_proto),
            shortfall_reason: chosen.shortfall.unwrap_or_default(),
            rejected,
            per_rank_batch_size: per_rank,
            global_batch_size: global,
            gpus,
        }))
    }

    async fn validate_gpu_selection(
        &self,
        request: Request<v1::ValidateGpuSelectionRequest>,
    ) -> Result<Response<v1::ValidateGpuSelectionResponse>, Status> {
        let who = caller(&self.ctx, &request)?;
        let req = request.into_inner();
        if req.gpu_ids.is_empty() {
            return Err(ApiError::field("gpu_ids", "name at least one GPU").into());
        }
        let config = req.config.map(parse_config).transpose()?;
        let estimate = config.as_ref().map(estimate_of);
        let need = estimate.map_or(0, |e| e.total);
        let candidates: Vec<Candidate> = self.snapshot(&who).into_iter().map(|(c, _)| c).collect();
        let problems: Vec<v1::GpuSelectionProblem> =
            selection::validate(&candidates, &req.gpu_ids, need)
                .into_iter()
                .map(|p| v1::GpuSelectionProblem {
                    gpu_id: p.gpu_id,
                    reason: p.reason.to_string(),
                    message: p.message,
                })
                .collect();
        let (per_rank, global) = batches(config.as_ref(), req.gpu_ids.len());
        Ok(Response::new(v1::ValidateGpuSelectionResponse {
            valid: problems.is_empty(),
            problems,
            estimate: estimate.as_ref().map(estimate_proto),
            per_rank_batch_size: per_rank,
            global_batch_size: global,
        }))
    }

    async fn estimate_memory(
        &self,
        request: Request<v1::EstimateMemoryRequest>,
    ) -> Result<Response<v1::MemoryEstimate>, Status> {
        let config = request
            .into_inner()
            .config
            .ok_or_else(|| ApiError::field_with(Reason::InvalidConfig, "config", "required"))?;
        let config = parse_config(config)?;
        Ok(Response::new(estimate_proto(&estimate_of(&config))))
    }

    async fn release_gpu(
        &self,
        request: Request<v1::ReleaseGpuRequest>,
    ) -> Result<Response<v1::Gpu>, Status> {
        let who = caller(&self.ctx, &request)?;
        let uuid = request.into_inner().gpu_uuid.trim().to_string();
        if uuid.is_empty() {
            return Err(ApiError::field("gpu_uuid", "required").into());
        }
        let method = "cohort.v1.GpuService/ReleaseGpu";
        let audit =
            crate::model::AuditEntry::ok(&who, method, &uuid, "").with("OK", "quarantine lifted");
        self.ctx
            .db
            .release_gpu(&uuid, audit)
            .await
            .map_err(ApiError::from)?;
        self.ctx.fleet.set_quarantine(&uuid, None);
        self.ctx.jobs.kick();
        tracing::info!(gpu = %uuid, "GPU released from quarantine");
        let gpu = self
            .snapshot(&who)
            .into_iter()
            .map(|(_, gpu)| gpu)
            .find(|g| g.info.as_ref().is_some_and(|i| i.uuid == uuid))
            .unwrap_or_else(|| v1::Gpu {
                info: Some(v1::GpuInfo {
                    uuid: uuid.clone(),
                    ..Default::default()
                }),
                availability: v1::GpuAvailability::Offline as i32,
                rank: -1,
                ..Default::default()
            });
        Ok(Response::new(gpu))
    }
}
