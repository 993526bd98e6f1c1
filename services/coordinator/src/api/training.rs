//! TrainingService over persistence. Placement is not done here: a created
//! training stays QUEUED until the scheduler ([`crate::jobs`]) places it.
//! WatchTraining replays the stored history, then follows it as the event
//! bell rings (with a slow poll as a safety net).

use super::caller::{caller, require_id, team_filter, visible, visible_training};
use super::convert::training_event;
use super::error::ApiError;
use super::page_token::{decode_training_cursor, encode_training_cursor, page_size};
use crate::context::Context;
use crate::model::{AuditEntry, EventPayload, JobState, StoredEvent};
use crate::persistence::details::TrainingDetails;
use crate::persistence::{DatabaseError, ListTrainings, LogicalError, NewTraining, TrainingCursor};
use cohort_proto::v1;
use cohort_proto::v1::training_service_server::TrainingService;
use std::time::Duration;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::training_requests::{check_cap, label_filter, state_filter, validate_create};
pub use super::training_requests::{DEFAULT_MAX_RESTARTS, MAX_REQUEST_ID_LEN};
/// How long a watcher with nothing new waits before it looks again even
/// without a ring from the event bell (a safety net: every event this
/// coordinator writes rings at once).
const WATCH_FALLBACK: Duration = Duration::from_secs(2);
/// Events read per query while watching.
const WATCH_BATCH: i64 = 256;

use crate::api::StatusStream as BoxStream;

#[derive(Debug, Clone)]
pub struct TrainingApi {
    ctx: Context,
}

/// Shared facts for describing trainings (see `TrainingApi::lookups`).
struct Lookups {
    /// Waiting trainings' positions (read when one described is waiting).
    positions: Option<std::sync::Arc<crate::jobs::positions::QueuePositions>>,
    /// Ranks, newest progress, estimates and hosts, read with the rows.
    details: TrainingDetails,
}

impl TrainingApi {
    pub fn new(ctx: Context) -> Self {
        Self { ctx }
    }
}

const CANCEL: &str = "cohort.v1.TrainingService/CancelTraining";

/// Whether a watcher that did not ask for per-rank events gets this one.
fn is_per_rank(e: &StoredEvent) -> bool {
    matches!(&e.payload, EventPayload::Rank(line) if matches!(
        line,
        cohort_spec::progress::ProgressLine::RankStats { .. }
            | cohort_spec::progress::ProgressLine::RankFinished { .. }
    ))
}

fn is_final_change(e: &StoredEvent) -> bool {
    matches!(&e.payload, EventPayload::StateChange(c) if c.to.is_final())
}

impl TrainingApi {
    /// What describing `trainings` needs beyond their rows and `details`
    /// (read with them): the waiting order, for queue positions, when some
    /// training described is waiting.
    async fn lookups(
        &self,
        trainings: &[&crate::model::Training],
        details: TrainingDetails,
    ) -> Result<Lookups, Status> {
        let positions = if trainings
            .iter()
            .any(|t| matches!(t.state, JobState::Queued | JobState::Restarting))
        {
            Some(
                self.ctx
                    .jobs
                    .queue_positions()
                    .await
                    .map_err(ApiError::from)?,
            )
        } else {
            None
        };
        Ok(Lookups { positions, details })
    }

    /// The full Training message: the row plus the current attempt's rank
    /// map, its queue position, stragglers and the latest progress.
    fn describe(&self, training: &crate::model::Training, lookups: &Lookups) -> v1::Training {
        let mut message = v1::Training::from(training);
        if let Some(ranks) = lookups.details.ranks.get(&training.id) {
            message.ranks = ranks
                .iter()
                .map(|r| {
                    let host = lookups
                        .details
                        .hosts
                        .get(&r.slot.agent_id)
                        .map_or("", String::as_str);
                    super::convert::rank_assignment(r, host)
                })
                .collect();
        }
        if let Some(sae) = training.sae_at_world_size() {
            message.global_batch_size = sae.optim.batch_size
                * i64::from(training.world_size)
                * sae.optim.accumulation_steps;
        }
        message.straggler_ranks = self.ctx.jobs.stragglers(&training.id);
        message.tracking = self
            .ctx
            .tracking
            .status(&training.id)
            .map(|s| v1::TrackingStatus {
                uri: s.uri,
                run_id: s.run_id,
                experiment_id: s.experiment_id,
                points_logged: s.logged,
                points_dropped: s.dropped,
                points_pending: s.pending,
                last_error: s.last_error,
                ended: s.ended,
            });
        message.queue_position = lookups
            .positions
            .as_ref()
            .and_then(|p| p.get(&training.id))
            .unwrap_or(0);
        if let Some(e) = lookups.details.estimates.get(&training.id) {
            let waiting = matches!(training.state, JobState::Queued | JobState::Restarting);
            message.estimated_start_time = e
                .start_time
                .filter(|_| waiting)
                .map(super::convert::timestamp);
            message.estimated_end_time = e.end_time.map(super::convert::timestamp);
            message.estimate_reason = e.reason.clone();
        }
        let latest = lookups.details.progress.get(&training.id);
        message.latest_progress = latest.and_then(super::convert::latest_progress);
        message.latest_program_progress = latest.and_then(super::convert::latest_program_progress);
        message
    }

    /// Refuse, before anything is written, what can never be placed as asked:
    /// GPU ids the coordinator has never seen (NOT_FOUND), and, when queueing
    /// is off, a request that can't be placed right now (FAILED_PRECONDITION).
    async fn check_placeable(&self, new: &NewTraining) -> Result<(), Status> {
        if let crate::model::GpuSelection::Ids { ids } = &new.gpu_request.selection {
            let agents = self.ctx.db.list_agents().await.map_err(ApiError::from)?;
            let known: Vec<&str> = agents
                .iter()
                .flat_map(|a| a.gpus.iter().map(|g| g.uuid.as_str()))
                .collect();
            let unknown: Vec<String> = ids
                .iter()
                .filter(|id| !known.contains(&id.as_str()))
                .cloned()
                .collect();
            if !unknown.is_empty() {
                return Err(ApiError::GpusNotFound(unknown).into());
            }
        }
        if new.gpu_request.queue {
            return Ok(());
        }
        self.ctx
            .jobs
            .plan_first(&new.gpu_request, &new.config, &new.team)
            .map(drop)
            .map_err(|why| ApiError::from(why).into())
    }
}

#[tonic::async_trait]
impl TrainingService for TrainingApi {
    type WatchTrainingStream = BoxStream<v1::TrainingEvent>;

    async fn create_training(
        &self,
        request: Request<v1::CreateTrainingRequest>,
    ) -> Result<Response<v1::Training>, Status> {
        let who = caller(&self.ctx, &request)?;
        let classes = &self.ctx.jobs.settings().classes;
        let mut new = validate_create(&who, classes, request.into_inner())?;
        if let Some(snapshot) = new.config.program().and_then(|p| p.snapshot()) {
            super::code::check_uploaded(&self.ctx.code, snapshot).await?;
        }
        let cap = self
            .ctx
            .jobs
            .max_class(&new.team)
            .await
            .map_err(ApiError::from)?;
        check_cap(
            classes,
            &new.team,
            cap.as_deref(),
            new.priority,
            &new.priority_class,
        )?;
        // The lifecycle spans join the trace of this call (see jobs::lifecycle).
        new.trace_context =
            cohort_observe::propagation::traceparent(&tracing::Span::current().context());
        self.check_placeable(&new).await?;
        new.max_queued = Some(self.ctx.jobs.default_queue_cap());
        let created = self
            .ctx
            .db
            .create_training(new)
            .await
            .map_err(ApiError::from)?;
        let t = &created.training;
        if created.created {
            tracing::info!(training_id = %t.id, request_id = ?t.request_id, "training created");
            self.ctx.jobs.arrived();
        } else {
            tracing::info!(training_id = %t.id, request_id = ?t.request_id, "create replayed by request_id");
        }
        Ok(Response::new(t.into()))
    }

    async fn get_training(
        &self,
        request: Request<v1::GetTrainingRequest>,
    ) -> Result<Response<v1::Training>, Status> {
        let who = caller(&self.ctx, &request)?;
        let id = request.into_inner().id;
        require_id("id", &id)?;
        let found = (self.ctx.db.described_training(&id).await).map_err(ApiError::from)?;
        let (training, details) = found.unzip();
        let training = visible(&who, &id, training)?;
        let details = details.unwrap_or_default();
        let lookups = self.lookups(&[&training], details).await?;
        Ok(Response::new(self.describe(&training, &lookups)))
    }

    async fn list_trainings(
        &self,
        request: Request<v1::ListTrainingsRequest>,
    ) -> Result<Response<v1::ListTrainingsResponse>, Status> {
        let who = caller(&self.ctx, &request)?;
        let req = request.into_inner();
        let limit = page_size(req.page_size)?;
        let page = ListTrainings {
            states: state_filter(&req.states)?,
            limit: limit + 1,
            after: decode_training_cursor(&req.page_token)?,
            team: match (team_filter(&who), req.team) {
                (Some(own), _) => Some(own),
                (None, asked) => Some(asked).filter(|t| !t.is_empty()),
            },
            labels: label_filter(req.labels)?,
        };
        let (mut trainings, details) = self
            .ctx
            .db
            .described_page(page)
            .await
            .map_err(ApiError::from)?;
        let more = trainings.len() as i64 > limit;
        trainings.truncate(limit as usize);
        let next_page_token = match trainings.last() {
            Some(last) if more => encode_training_cursor(&TrainingCursor::from(last)),
            _ => String::new(),
        };
        Ok(Response::new(v1::ListTrainingsResponse {
            trainings: {
                let page: Vec<_> = trainings.iter().collect();
                let lookups = self.lookups(&page, details).await?;
                trainings
                    .iter()
                    .map(|t| self.describe(t, &lookups))
                    .collect()
            },
            next_page_token,
        }))
    }

    async fn cancel_training(
        &self,
        request: Request<v1::CancelTrainingRequest>,
    ) -> Result<Response<v1::Training>, Status> {
        let who = caller(&self.ctx, &request)?;
        let req = request.into_inner();
        let target = visible_training(&self.ctx, &who, "id", &req.id).await?;
        let audit = AuditEntry::ok(&who, CANCEL, &target.id, &target.team);
        let reason = if req.reason.is_empty() {
            "cancelled by a client".to_string()
        } else {
            format!("cancelled: {}", req.reason)
        };
        let db = &self.ctx.db;
        let training = match self.ctx.jobs.cancel(&req.id, &reason, Some(audit)).await {
            Ok(t) => t,
            // Cancelling a cancelled training is a no-op, not an error.
            Err(DatabaseError::Logical(LogicalError::IllegalTransition {
                from: JobState::Cancelled,
                ..
            })) => db
                .get_training(&req.id)
                .await
                .map_err(ApiError::from)?
                .ok_or_else(|| ApiError::from(LogicalError::TrainingNotFound(req.id)))?,
            Err(e) => return Err(ApiError::from(e).into()),
        };
        Ok(Response::new((&training).into()))
    }

    async fn watch_training(
        &self,
        request: Request<v1::WatchTrainingRequest>,
    ) -> Result<Response<Self::WatchTrainingStream>, Status> {
        let who = caller(&self.ctx, &request)?;
        let req = request.into_inner();
        let db = self.ctx.db.clone();
        let training = visible_training(&self.ctx, &who, "id", &req.id).await?;
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        // Subscribed before the first query, so no event falls between.
        let mut rung = db.events_bell().subscribe(&req.id);
        let mut after = i64::try_from(req.after_sequence).unwrap_or(i64::MAX);
        let mut ended = training.state.is_final() && after >= training.last_event_seq;
        let mut thinning = super::thinning::Thinning::plan(
            &self.ctx,
            &req.id,
            after,
            training.last_event_seq,
            req.max_points,
        )
        .await?;
        tokio::spawn(async move {
            while !ended {
                let batch = match db.events_after(&req.id, after, WATCH_BATCH).await {
                    Ok(batch) => batch,
                    Err(e) => {
                        let _ = tx.send(Err(ApiError::from(e).into())).await;
                        return;
                    }
                };
                if batch.is_empty() {
                    tokio::select! {
                        _ = rung.changed() => {}
                        _ = tokio::time::sleep(WATCH_FALLBACK) => {}
                        _ = tx.closed() => return,
                    }
                    continue;
                }
                for event in batch {
                    after = event.seq;
                    ended = is_final_change(&event);
                    if !req.include_rank_stats && is_per_rank(&event) {
                        continue;
                    }
                    if thinning.as_mut().is_some_and(|t| !t.keep(&event)) {
                        continue;
                    }
                    let Some(message) = training_event(&event) else {
                        continue;
                    };
                    if tx.send(Ok(message)).await.is_err() {
                        return; // the watcher went away
                    }
                    if ended {
                        return; // the final state change is the last event
                    }
                }
            }
        });
        Ok(Response::new(
            self.ctx.until_stopping(ReceiverStream::new(rx)),
        ))
    }

    async fn list_checkpoints(
        &self,
        request: Request<v1::ListCheckpointsRequest>,
    ) -> Result<Response<v1::ListCheckpointsResponse>, Status> {
        let who = caller(&self.ctx, &request)?;
        super::checkpoints::list(&self.ctx, &who, request.into_inner())
            .await
            .map(Response::new)
    }

    type DownloadCheckpointStream = BoxStream<v1::CheckpointChunk>;

    async fn download_checkpoint(
        &self,
        request: Request<v1::DownloadCheckpointRequest>,
    ) -> Result<Response<Self::DownloadCheckpointStream>, Status> {
        let who = caller(&self.ctx, &request)?;
        super::checkpoints::download(&self.ctx, &who, request.into_inner())
            .await
            .map(Response::new)
    }

    type WatchLogsStream = BoxStream<v1::LogLine>;

    async fn watch_logs(
        &self,
        request: Request<v1::WatchLogsRequest>,
    ) -> Result<Response<Self::WatchLogsStream>, Status> {
        let who = caller(&self.ctx, &request)?;
        super::logs::watch_logs(&self.ctx, &who, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn parse_training_config(
        &self,
        request: Request<v1::ParseTrainingConfigRequest>,
    ) -> Result<Response<v1::TrainingConfig>, Status> {
        caller(&self.ctx, &request)?;
        super::training_requests::parse_config(request.into_inner()).map(Response::new)
    }

    async fn upload_code(
        &self,
        request: Request<tonic::Streaming<v1::UploadCodeRequest>>,
    ) -> Result<Response<v1::CodeSnapshot>, Status> {
        caller(&self.ctx, &request)?;
        super::code::upload(&self.ctx.code, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn get_code(
        &self,
        request: Request<v1::GetCodeRequest>,
    ) -> Result<Response<v1::CodeSnapshot>, Status> {
        caller(&self.ctx, &request)?;
        super::code::get(&self.ctx.code, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn list_priority_classes(
        &self,
        request: Request<v1::ListPriorityClassesRequest>,
    ) -> Result<Response<v1::ListPriorityClassesResponse>, Status> {
        caller(&self.ctx, &request)?;
        let classes = &self.ctx.jobs.settings().classes;
        Ok(Response::new(v1::ListPriorityClassesResponse {
            classes: classes
                .all()
                .iter()
                .map(|c| v1::PriorityClass {
                    name: c.name.clone(),
                    value: c.value,
                    preempting: c.preempting,
                })
                .collect(),
            default_class: classes.default_class().name.clone(),
        }))
    }

    async fn get_training_report(
        &self,
        request: Request<v1::GetTrainingReportRequest>,
    ) -> Result<Response<v1::TrainingReport>, Status> {
        let who = caller(&self.ctx, &request)?;
        super::report::get_training_report(&self.ctx, &who, request.into_inner())
            .await
            .map(Response::new)
    }
}
