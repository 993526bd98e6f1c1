//! SweepService: sweeps are stored here and run by the leader's searcher
//! ([`crate::sweeps`]); GetSweep reads its trials' trainings and their
//! newest progress for the objective and the best trials.

use super::caller::{caller, ensure_team, not_yours, team_filter};
use super::error::ApiError;
use super::page_token::{decode_training_cursor, encode_training_cursor, page_size};
use super::sweep_requests::validate_create;
use crate::context::Context;
use crate::model::{AuditEntry, Direction, Principal, Sweep, SweepState, Trial};
use crate::persistence::sweeps::ListSweeps;
use crate::persistence::{ListTrainings, LogicalError, TrainingCursor};
use crate::sweeps::objective;
use cohort_proto::sweep::{params_to_struct, space_to_proto};
use cohort_proto::v1;
use cohort_proto::v1::sweep_service_server::SweepService;
use cohort_spec::frontier::Point;
use cohort_spec::Workload;
use std::collections::HashMap;
use tonic::{Request, Response, Status};

const CREATE: &str = "cohort.v1.SweepService/CreateSweep";
const CANCEL: &str = "cohort.v1.SweepService/CancelSweep";
/// The best trials GetSweep names.
const BEST: usize = 5;

#[derive(Debug, Clone)]
pub struct SweepApi {
    ctx: Context,
}

impl SweepApi {
    pub fn new(ctx: Context) -> Self {
        Self { ctx }
    }

    /// Sweep `id`, if `who` may see it (AIP-211, as trainings: a missing
    /// sweep is PERMISSION_DENIED to a caller scoped to a team).
    async fn visible(&self, who: &Principal, id: &str) -> Result<Sweep, Status> {
        if id.is_empty() {
            return Err(ApiError::field("id", "required").into());
        }
        match self.ctx.db.get_sweep(id).await.map_err(ApiError::from)? {
            Some(sweep) => {
                ensure_team(who, &sweep.team, &format!("sweep {id}"))?;
                Ok(sweep)
            }
            None if !who.is_cluster_admin() => Err(not_yours(who, &format!("sweep {id}"), "")),
            None => Err(ApiError::from(LogicalError::SweepNotFound(id.to_string())).into()),
        }
    }

    /// The whole Sweep message: its trials with their objective values,
    /// the best trials and the GPU-hours spent.
    async fn describe(&self, sweep: &Sweep) -> Result<v1::Sweep, Status> {
        let db = &self.ctx.db;
        let trials = db.sweep_trials(&sweep.id).await.map_err(ApiError::from)?;
        let trainings = db
            .list_trainings(ListTrainings {
                states: Vec::new(),
                limit: i64::from(super::sweep_requests::MAX_TRIALS) + 1,
                after: None,
                team: Some(sweep.team.clone()),
                labels: vec![("sweep".into(), sweep.id.clone())],
            })
            .await
            .map_err(ApiError::from)?;
        let details = db
            .training_details(&trainings.iter().collect::<Vec<_>>())
            .await
            .map_err(ApiError::from)?;
        let values: HashMap<&str, (f64, i64)> = details
            .progress
            .iter()
            .filter_map(|(id, event)| {
                objective::read(&sweep.objective.metric, event)
                    .map(|r| (id.as_str(), (r.value, r.step)))
            })
            .collect();
        let spent = db
            .gpu_seconds(trials.iter().map(|t| t.training_id.clone()).collect())
            .await
            .map_err(ApiError::from)?
            .values()
            .sum::<f64>()
            / 3600.0;
        let points: HashMap<&str, Point> = details
            .progress
            .iter()
            .filter_map(|(id, event)| objective::point(event).map(|p| (id.as_str(), p)))
            .collect();
        let standing = sweep
            .objective
            .is_frontier()
            .then(|| frontier_standing(sweep, &trials, &points));
        let rungs = db.sweep_rungs(&sweep.id).await.map_err(ApiError::from)?;
        let mut message = summary(sweep);
        message.best = match &standing {
            Some(s) => s.on.clone(),
            None => best(&trials, &values, sweep.objective.direction),
        };
        message.frontier_hypervolume = standing.as_ref().map_or(0.0, |s| s.hypervolume);
        message.gpu_hours = spent;
        message.trials = trials
            .iter()
            .map(|t| {
                let id = t.training_id.as_str();
                let value = values.get(id);
                let point = points.get(id);
                let objective = match &standing {
                    Some(s) => s.distance.get(id).copied().filter(|d| d.is_finite()),
                    None => value.map(|v| v.0),
                };
                v1::SweepTrial {
                    index: t.index,
                    training_id: t.training_id.clone(),
                    state: v1::training::State::from(t.state) as i32,
                    state_reason: t.state_reason.clone(),
                    params: Some(params_to_struct(&t.params)),
                    objective,
                    step: value.map_or(0, |v| v.1),
                    rungs: rungs
                        .iter()
                        .filter(|r| r.trial_index == t.index)
                        .map(|r| v1::SweepRung {
                            rung: r.rung,
                            step: r.step,
                            value: r.value,
                            l0: r.l0,
                        })
                        .collect(),
                    paused: t.paused,
                    l0: point.map(|p| p.l0),
                    explained_variance: point.map(|p| p.explained_variance),
                    on_frontier: standing
                        .as_ref()
                        .is_some_and(|s| s.on.iter().any(|o| o == id)),
                }
            })
            .collect();
        Ok(message)
    }
}

/// The frontier of the trials that did not fail, its hypervolume measured
/// from the largest dictionary any trial trains (every latent active).
fn frontier_standing(
    sweep: &Sweep,
    trials: &[Trial],
    points: &HashMap<&str, Point>,
) -> objective::Standing {
    let considered: Vec<(String, Point)> = trials
        .iter()
        .filter(|t| t.is_result())
        .filter_map(|t| {
            let p = points.get(t.training_id.as_str())?;
            Some((t.training_id.clone(), *p))
        })
        .collect();
    let widest = trials
        .iter()
        .filter_map(
            |t| match cohort_spec::sweep::apply(&sweep.config, &t.params) {
                Ok(Workload::Sae(c)) => Some(c.d_sae() as f64),
                _ => None,
            },
        )
        .fold(0.0, f64::max);
    let reference = considered
        .iter()
        .map(|(_, p)| p.l0)
        .filter(|l0| l0.is_finite())
        .fold(widest, f64::max);
    objective::standing(&considered, reference)
}

/// The trials with the best finite value, best first: FAILED trials (a
/// NaN loss is a failure) and those the searcher stopped part-way are left
/// out.
fn best(trials: &[Trial], values: &HashMap<&str, (f64, i64)>, direction: Direction) -> Vec<String> {
    let mut ranked: Vec<(&str, f64)> = trials
        .iter()
        .filter(|t| t.is_result())
        .filter_map(|t| {
            let id = t.training_id.as_str();
            values
                .get(id)
                .filter(|v| v.0.is_finite())
                .map(|v| (id, v.0))
        })
        .collect();
    ranked.sort_by(|a, b| {
        let order = a.1.total_cmp(&b.1);
        match direction {
            Direction::Minimize => order,
            Direction::Maximize => order.reverse(),
        }
    });
    ranked
        .into_iter()
        .take(BEST)
        .map(|(id, _)| id.to_string())
        .collect()
}

/// A sweep without its trials (what ListSweeps gives).
fn summary(s: &Sweep) -> v1::Sweep {
    v1::Sweep {
        id: s.id.clone(),
        display_name: s.display_name.clone(),
        team: s.team.clone(),
        creator: s.creator.clone(),
        config: Some(v1::TrainingConfig::from(&s.config)),
        space: space_to_proto(&s.space),
        searcher: match s.searcher {
            crate::model::Searcher::Grid => v1::Searcher::Grid,
            crate::model::Searcher::Random => v1::Searcher::Random,
            crate::model::Searcher::Asha => v1::Searcher::Asha,
            crate::model::Searcher::Median => v1::Searcher::Median,
        } as i32,
        seed: s.seed,
        objective: Some(v1::SweepObjective {
            metric: s.objective.metric.clone(),
            direction: match s.objective.direction {
                Direction::Minimize => v1::sweep_objective::Direction::Minimize,
                Direction::Maximize => v1::sweep_objective::Direction::Maximize,
            } as i32,
        }),
        max_trials: s.max_trials,
        max_concurrent: s.max_concurrent,
        max_gpu_hours: s.max_gpu_hours,
        gpus: Some((&s.trial.gpu_request).into()),
        priority_class: s.trial.priority_class.clone(),
        max_restarts: s.trial.max_restarts,
        state: match s.state {
            SweepState::Running => v1::sweep::State::Running,
            SweepState::Succeeded => v1::sweep::State::Succeeded,
            SweepState::Failed => v1::sweep::State::Failed,
            SweepState::Cancelled => v1::sweep::State::Cancelled,
        } as i32,
        state_reason: s.state_reason.clone(),
        trials: Vec::new(),
        best: Vec::new(),
        frontier_hypervolume: 0.0,
        gpu_hours: 0.0,
        create_time: Some(super::convert::timestamp(s.create_time)),
        end_time: s.end_time.map(super::convert::timestamp),
        eta: s.eta,
    }
}

#[tonic::async_trait]
impl SweepService for SweepApi {
    async fn create_sweep(
        &self,
        request: Request<v1::CreateSweepRequest>,
    ) -> Result<Response<v1::Sweep>, Status> {
        let who = caller(&self.ctx, &request)?;
        let req = request.into_inner();
        if let Some(snapshot) = req
            .config
            .clone()
            .and_then(|c| cohort_spec::Workload::try_from(c).ok())
            .and_then(|w| w.program().and_then(|p| p.snapshot().cloned()))
        {
            super::code::check_uploaded(&self.ctx.code, &snapshot).await?;
        }
        let classes = &self.ctx.jobs.settings().classes;
        let cap = self
            .ctx
            .jobs
            .max_class(who.team())
            .await
            .map_err(ApiError::from)?;
        let sweep = validate_create(&who, classes, cap.as_deref(), req)?;
        let audit = AuditEntry::ok(&who, CREATE, &sweep.id, who.team());
        let stored = self
            .ctx
            .db
            .create_sweep(sweep, audit)
            .await
            .map_err(ApiError::from)?;
        if stored.created {
            tracing::info!(sweep_id = %stored.sweep.id, searcher = stored.sweep.searcher.as_str(), max_trials = stored.sweep.max_trials, "sweep created");
            self.ctx.sweeps_wake.notify_one();
        }
        Ok(Response::new(self.describe(&stored.sweep).await?))
    }

    async fn get_sweep(
        &self,
        request: Request<v1::GetSweepRequest>,
    ) -> Result<Response<v1::Sweep>, Status> {
        let who = caller(&self.ctx, &request)?;
        let sweep = self.visible(&who, &request.into_inner().id).await?;
        Ok(Response::new(self.describe(&sweep).await?))
    }

    async fn list_sweeps(
        &self,
        request: Request<v1::ListSweepsRequest>,
    ) -> Result<Response<v1::ListSweepsResponse>, Status> {
        let who = caller(&self.ctx, &request)?;
        let req = request.into_inner();
        let limit = page_size(req.page_size)?;
        let after = decode_training_cursor(&req.page_token)?;
        let mut sweeps = self
            .ctx
            .db
            .list_sweeps(ListSweeps {
                team: team_filter(&who),
                limit: limit + 1,
                after: after.map(|c| (c.create_time, c.id)),
            })
            .await
            .map_err(ApiError::from)?;
        let more = sweeps.len() as i64 > limit;
        sweeps.truncate(limit as usize);
        let next_page_token = match sweeps.last() {
            Some(last) if more => encode_training_cursor(&TrainingCursor {
                create_time: last.create_time,
                id: last.id.clone(),
            }),
            _ => String::new(),
        };
        Ok(Response::new(v1::ListSweepsResponse {
            sweeps: sweeps.iter().map(summary).collect(),
            next_page_token,
        }))
    }

    async fn cancel_sweep(
        &self,
        request: Request<v1::CancelSweepRequest>,
    ) -> Result<Response<v1::Sweep>, Status> {
        let who = caller(&self.ctx, &request)?;
        let req = request.into_inner();
        let sweep = self.visible(&who, &req.id).await?;
        let reason = if req.reason.is_empty() {
            "cancelled by a client".to_string()
        } else {
            format!("cancelled: {}", req.reason)
        };
        let audit = AuditEntry::ok(&who, CANCEL, &sweep.id, &sweep.team);
        let cancelled = self
            .ctx
            .db
            .cancel_sweep(&sweep.id, &reason, audit)
            .await
            .map_err(ApiError::from)?;
        crate::sweeps::cancel_trials(
            &self.ctx,
            &cancelled.id,
            &format!("sweep {} {reason}", cancelled.id),
        )
        .await
        .map_err(ApiError::from)?;
        Ok(Response::new(self.describe(&cancelled).await?))
    }
}
