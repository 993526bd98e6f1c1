//! Sweeps (`sweeps`) and their trials (`sweep_trials`): a sweep is stored
//! with its audit row; a trial is its training (written as CreateTraining
//! writes one) and its row, in one transaction, only while the sweep runs.

use super::audit::insert_in;
use super::lifecycle::creates::{create_batch_in, Created, NewTraining};
use super::rows::{from_db_time, now, request_key, to_db_time};
use super::schema::{state_transitions, sweep_rungs, sweep_trials, sweeps, trainings};
use super::{DatabaseError, DbConnection, LogicalError, Persistence};
use crate::model::{
    AuditEntry, Direction, JobState, Objective, RungRecord, Searcher, StoredEvent, Sweep,
    SweepState, Trial, TrialTemplate,
};
use chrono::{DateTime, NaiveDateTime, Utc};
use cohort_spec::sweep::{Params, Space};
use cohort_spec::Workload;
use diesel::prelude::*;
use std::collections::HashMap;

/// The most sweeps one pass of the searcher reads (oldest first).
pub const MAX_RUNNING_READ: i64 = 1000;

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = sweeps)]
struct SweepRow {
    id: String,
    request_key: Option<String>,
    team: String,
    creator: String,
    display_name: String,
    config_json: String,
    space_json: String,
    searcher: String,
    eta: f64,
    seed: i64,
    metric: String,
    direction: String,
    max_trials: i32,
    max_concurrent: i32,
    max_gpu_hours: f64,
    gpu_request_json: String,
    priority: i32,
    priority_class: String,
    max_restarts: i32,
    state: String,
    state_reason: String,
    create_time: NaiveDateTime,
    end_time: Option<NaiveDateTime>,
}

fn corrupt(what: &str, why: impl std::fmt::Display) -> DatabaseError {
    DatabaseError::Corrupt(format!("sweeps.{what}: {why}"))
}

impl TryFrom<SweepRow> for Sweep {
    type Error = DatabaseError;

    fn try_from(r: SweepRow) -> Result<Self, DatabaseError> {
        let space_value: serde_json::Value =
            serde_json::from_str(&r.space_json).map_err(|e| corrupt("space_json", e))?;
        Ok(Sweep {
            request_id: r
                .request_key
                .as_deref()
                .map(|k| super::rows::client_request_id(&r.team, k.to_string())),
            config: Workload::from_json(&r.config_json).map_err(|e| corrupt("config_json", e))?,
            space: Space::from_json(&space_value).map_err(|e| corrupt("space_json", e))?,
            searcher: Searcher::parse(&r.searcher)
                .ok_or_else(|| corrupt("searcher", &r.searcher))?,
            eta: r.eta,
            seed: r.seed as u64,
            objective: Objective {
                metric: r.metric,
                direction: Direction::parse(&r.direction)
                    .ok_or_else(|| corrupt("direction", &r.direction))?,
            },
            max_trials: r.max_trials,
            max_concurrent: r.max_concurrent,
            max_gpu_hours: r.max_gpu_hours,
            trial: TrialTemplate {
                gpu_request: serde_json::from_str(&r.gpu_request_json)
                    .map_err(|e| corrupt("gpu_request_json", e))?,
                priority: r.priority,
                priority_class: r.priority_class,
                max_restarts: r.max_restarts,
            },
            state: SweepState::parse(&r.state).ok_or_else(|| corrupt("state", &r.state))?,
            state_reason: r.state_reason,
            create_time: from_db_time(r.create_time),
            end_time: r.end_time.map(from_db_time),
            id: r.id,
            team: r.team,
            creator: r.creator,
            display_name: r.display_name,
        })
    }
}

fn row_of(s: &Sweep) -> SweepRow {
    SweepRow {
        id: s.id.clone(),
        request_key: s.request_id.as_deref().map(|r| request_key(&s.team, r)),
        team: s.team.clone(),
        creator: s.creator.clone(),
        display_name: s.display_name.clone(),
        config_json: s.config.to_json(),
        space_json: s.space.to_json().to_string(),
        searcher: s.searcher.as_str().into(),
        eta: s.eta,
        seed: s.seed as i64,
        metric: s.objective.metric.clone(),
        direction: s.objective.direction.as_str().into(),
        max_trials: s.max_trials,
        max_concurrent: s.max_concurrent,
        max_gpu_hours: s.max_gpu_hours,
        gpu_request_json: serde_json::to_string(&s.trial.gpu_request)
            .expect("gpu request serialises"),
        priority: s.trial.priority,
        priority_class: s.trial.priority_class.clone(),
        max_restarts: s.trial.max_restarts,
        state: s.state.as_str().into(),
        state_reason: s.state_reason.clone(),
        create_time: to_db_time(s.create_time),
        end_time: s.end_time.map(to_db_time),
    }
}

fn load_sweep(conn: &mut DbConnection, id: &str) -> Result<Option<Sweep>, DatabaseError> {
    sweeps::table
        .find(id)
        .select(SweepRow::as_select())
        .first(conn)
        .optional()?
        .map(Sweep::try_from)
        .transpose()
}

/// What CreateSweep stored.
#[derive(Debug)]
pub struct CreatedSweep {
    pub sweep: Sweep,
    /// False when its request_id returned a sweep stored before.
    pub created: bool,
}

/// A page of sweeps, newest first.
#[derive(Debug, Clone)]
pub struct ListSweeps {
    pub team: Option<String>,
    pub limit: i64,
    /// After this (create time, id).
    pub after: Option<(DateTime<Utc>, String)>,
}

/// What a trial's transaction did.
#[derive(Debug)]
pub enum TrialAdded {
    Added(Box<Created>),
    /// The sweep is no longer RUNNING: nothing written.
    SweepEnded,
}

type TrialRow = (i32, i32, String, String, String, String, String);

fn trial_of(row: TrialRow) -> Result<Trial, DatabaseError> {
    let (index, draw, training_id, params, state, state_reason, held_by) = row;
    let params: Params =
        serde_json::from_str(&params).map_err(|e| corrupt("sweep_trials.params_json", e))?;
    let state = state
        .parse::<JobState>()
        .map_err(|e| corrupt("trainings.state", e))?;
    Ok(Trial {
        index,
        draw,
        training_id,
        params,
        // A hold outlives a cancel; only a QUEUED trial is paused.
        paused: !held_by.is_empty() && state == JobState::Queued,
        state,
        state_reason,
    })
}

fn trials_in(conn: &mut DbConnection, sweep_id: &str) -> Result<Vec<Trial>, DatabaseError> {
    let rows: Vec<TrialRow> = sweep_trials::table
        .inner_join(trainings::table)
        .filter(sweep_trials::sweep_id.eq(sweep_id))
        .order(sweep_trials::trial_index.asc())
        .select((
            sweep_trials::trial_index,
            sweep_trials::draw,
            sweep_trials::training_id,
            sweep_trials::params_json,
            trainings::state,
            trainings::state_reason,
            trainings::held_by,
        ))
        .load(conn)?;
    rows.into_iter().map(trial_of).collect()
}

impl Persistence {
    /// Stores a new RUNNING sweep and its audit row, or returns the sweep
    /// its request_id stored before (the same config, space and searcher),
    /// else [`LogicalError::SweepRequestIdConflict`].
    pub async fn create_sweep(
        &self,
        sweep: Sweep,
        audit: AuditEntry,
    ) -> Result<CreatedSweep, DatabaseError> {
        self.transaction("create_sweep", move |c| {
            let row = row_of(&sweep);
            if let Some(key) = &row.request_key {
                let stored: Option<SweepRow> = sweeps::table
                    .filter(sweeps::request_key.eq(key))
                    .select(SweepRow::as_select())
                    .first(c)
                    .optional()?;
                if let Some(stored) = stored {
                    let same = stored.config_json == row.config_json
                        && stored.space_json == row.space_json
                        && stored.searcher == row.searcher;
                    if !same {
                        return Err(LogicalError::SweepRequestIdConflict {
                            request_id: sweep.request_id.clone().unwrap_or_default(),
                            existing: stored.id,
                        }
                        .into());
                    }
                    return Ok(CreatedSweep {
                        sweep: stored.try_into()?,
                        created: false,
                    });
                }
            }
            diesel::insert_into(sweeps::table).values(&row).execute(c)?;
            insert_in(
                c,
                &AuditEntry {
                    target: sweep.id.clone(),
                    ..audit.clone()
                },
                now(),
            )?;
            Ok(CreatedSweep {
                sweep: sweep.clone(),
                created: true,
            })
        })
        .await
    }

    /// One sweep, if it exists.
    pub async fn get_sweep(&self, id: &str) -> Result<Option<Sweep>, DatabaseError> {
        let id = id.to_string();
        self.read("get_sweep", move |c| load_sweep(c, &id)).await
    }

    /// A sweep's trials with their trainings' states, oldest first (at
    /// most its max_trials, 1,024).
    pub async fn sweep_trials(&self, sweep_id: &str) -> Result<Vec<Trial>, DatabaseError> {
        let id = sweep_id.to_string();
        self.read("sweep_trials", move |c| trials_in(c, &id)).await
    }

    /// One page of sweeps, newest first.
    pub async fn list_sweeps(&self, page: ListSweeps) -> Result<Vec<Sweep>, DatabaseError> {
        self.read("list_sweeps", move |c| {
            let mut query = sweeps::table
                .select(SweepRow::as_select())
                .order((sweeps::create_time.desc(), sweeps::id.desc()))
                .limit(page.limit)
                .into_boxed();
            if let Some(team) = &page.team {
                query = query.filter(sweeps::team.eq(team.clone()));
            }
            if let Some((time, id)) = &page.after {
                let t = to_db_time(*time);
                query = query.filter(
                    sweeps::create_time
                        .lt(t)
                        .or(sweeps::create_time.eq(t).and(sweeps::id.lt(id.clone()))),
                );
            }
            query.load(c)?.into_iter().map(Sweep::try_from).collect()
        })
        .await
    }

    /// The RUNNING sweeps, oldest first (at most [`MAX_RUNNING_READ`]).
    pub async fn running_sweeps(&self) -> Result<Vec<Sweep>, DatabaseError> {
        self.read("running_sweeps", |c| {
            sweeps::table
                .filter(sweeps::state.eq(SweepState::Running.as_str()))
                .order((sweeps::create_time.asc(), sweeps::id.asc()))
                .limit(MAX_RUNNING_READ)
                .select(SweepRow::as_select())
                .load(c)?
                .into_iter()
                .map(Sweep::try_from)
                .collect()
        })
        .await
    }

    /// Trials not ended of sweeps that did (a cancel whose trials were not
    /// all cancelled before its coordinator went away), at most 1,000.
    pub async fn orphaned_trials(&self) -> Result<Vec<String>, DatabaseError> {
        self.read("orphaned_trials", |c| {
            let final_states: Vec<&str> = JobState::ALL
                .iter()
                .filter(|s| s.is_final())
                .map(|s| s.as_str())
                .collect();
            Ok(sweep_trials::table
                .inner_join(sweeps::table)
                .inner_join(trainings::table)
                .filter(sweeps::state.ne(SweepState::Running.as_str()))
                .filter(trainings::state.ne_all(final_states))
                .select(sweep_trials::training_id)
                .limit(1000)
                .load(c)?)
        })
        .await
    }

    /// Trial `index` of a RUNNING sweep: its training (as CreateTraining
    /// writes one) and its row, in one transaction.
    pub async fn add_trial(
        &self,
        sweep_id: &str,
        index: i32,
        draw: i32,
        params: &Params,
        training: NewTraining,
    ) -> Result<TrialAdded, DatabaseError> {
        let sweep_id = sweep_id.to_string();
        let params_json = serde_json::to_string(params).expect("params serialise");
        self.transaction_noting("add_trial", move |c, out| {
            let state: Option<String> = sweeps::table
                .find(&sweep_id)
                .select(sweeps::state)
                .first(c)
                .optional()?;
            if state.as_deref() != Some(SweepState::Running.as_str()) {
                return Ok(TrialAdded::SweepEnded);
            }
            let created =
                create_batch_in(c, out, std::slice::from_ref(&training), &HashMap::new())?
                    .outcomes
                    .pop()
                    .ok_or_else(|| {
                        DatabaseError::Invariant("a create without an outcome".into())
                    })??;
            diesel::insert_into(sweep_trials::table)
                .values((
                    sweep_trials::sweep_id.eq(&sweep_id),
                    sweep_trials::trial_index.eq(index),
                    sweep_trials::draw.eq(draw),
                    sweep_trials::training_id.eq(&created.training.id),
                    sweep_trials::params_json.eq(&params_json),
                ))
                .execute(c)?;
            Ok(TrialAdded::Added(Box::new(created)))
        })
        .await
    }

    /// Ends a RUNNING sweep (SUCCEEDED or FAILED); false when it was no
    /// longer RUNNING.
    pub async fn finish_sweep(
        &self,
        id: &str,
        state: SweepState,
        reason: &str,
    ) -> Result<bool, DatabaseError> {
        let (id, reason) = (id.to_string(), reason.to_string());
        self.transaction("finish_sweep", move |c| {
            let n = diesel::update(
                sweeps::table
                    .find(&id)
                    .filter(sweeps::state.eq(SweepState::Running.as_str())),
            )
            .set((
                sweeps::state.eq(state.as_str()),
                sweeps::state_reason.eq(&reason),
                sweeps::end_time.eq(Some(to_db_time(now()))),
            ))
            .execute(c)?;
            Ok(n == 1)
        })
        .await
    }

    /// Cancels a RUNNING sweep with its audit row (a CANCELLED one is
    /// returned as it is; another ended one is [`LogicalError::SweepEnded`]).
    /// Its trials are the caller's to cancel.
    pub async fn cancel_sweep(
        &self,
        id: &str,
        reason: &str,
        audit: AuditEntry,
    ) -> Result<Sweep, DatabaseError> {
        let (id, reason) = (id.to_string(), reason.to_string());
        self.transaction("cancel_sweep", move |c| {
            let Some(sweep) = load_sweep(c, &id)? else {
                return Err(LogicalError::SweepNotFound(id.clone()).into());
            };
            match sweep.state {
                SweepState::Cancelled => return Ok(sweep),
                SweepState::Succeeded | SweepState::Failed => {
                    return Err(LogicalError::SweepEnded {
                        id: id.clone(),
                        state: sweep.state.as_str(),
                    }
                    .into())
                }
                SweepState::Running => {}
            }
            let at = now();
            diesel::update(sweeps::table.find(&id))
                .set((
                    sweeps::state.eq(SweepState::Cancelled.as_str()),
                    sweeps::state_reason.eq(&reason),
                    sweeps::end_time.eq(Some(to_db_time(at))),
                ))
                .execute(c)?;
            insert_in(c, &audit, at)?;
            Ok(load_sweep(c, &id)?.expect("updated in this transaction"))
        })
        .await
    }

    /// GPU-seconds each training spent RUNNING (its world size times the
    /// time between each move to RUNNING and the next transition, up to
    /// now for one still running).
    pub async fn gpu_seconds(
        &self,
        training_ids: Vec<String>,
    ) -> Result<HashMap<String, f64>, DatabaseError> {
        if training_ids.is_empty() {
            return Ok(HashMap::new());
        }
        self.read("gpu_seconds", move |c| {
            let mut out = HashMap::new();
            for chunk in training_ids.chunks(500) {
                let sizes: HashMap<String, i32> = trainings::table
                    .filter(trainings::id.eq_any(chunk))
                    .select((trainings::id, trainings::world_size))
                    .load::<(String, i32)>(c)?
                    .into_iter()
                    .collect();
                let moves: Vec<(String, String, NaiveDateTime)> = state_transitions::table
                    .filter(state_transitions::training_id.eq_any(chunk))
                    .order((state_transitions::training_id, state_transitions::id))
                    .select((
                        state_transitions::training_id,
                        state_transitions::to_state,
                        state_transitions::at,
                    ))
                    .load(c)?;
                let end = to_db_time(now());
                let mut running: Option<(String, NaiveDateTime)> = None;
                for (id, to, at) in moves {
                    if let Some((was, since)) = running.take() {
                        let until = if was == id { at } else { end };
                        let secs = (until - since).num_milliseconds().max(0) as f64 / 1000.0;
                        *out.entry(was.clone()).or_insert(0.0) +=
                            secs * f64::from(*sizes.get(&was).unwrap_or(&0));
                    }
                    if to == JobState::Running.as_str() {
                        running = Some((id, at));
                    }
                }
                if let Some((was, since)) = running {
                    let secs = (end - since).num_milliseconds().max(0) as f64 / 1000.0;
                    *out.entry(was.clone()).or_insert(0.0) +=
                        secs * f64::from(*sizes.get(&was).unwrap_or(&0));
                }
            }
            Ok(out)
        })
        .await
    }

    /// A sweep's rung records, by trial then rung.
    pub async fn sweep_rungs(&self, sweep_id: &str) -> Result<Vec<RungRecord>, DatabaseError> {
        let id = sweep_id.to_string();
        self.read("sweep_rungs", move |c| {
            let rows: Vec<(i32, i32, i64, f64, Option<f64>)> = sweep_rungs::table
                .filter(sweep_rungs::sweep_id.eq(&id))
                .order((sweep_rungs::trial_index, sweep_rungs::rung))
                .select((
                    sweep_rungs::trial_index,
                    sweep_rungs::rung,
                    sweep_rungs::step,
                    sweep_rungs::value,
                    sweep_rungs::l0,
                ))
                .load(c)?;
            Ok(rows
                .into_iter()
                .map(|(trial_index, rung, step, value, l0)| RungRecord {
                    trial_index,
                    rung,
                    step,
                    value,
                    l0,
                })
                .collect())
        })
        .await
    }

    /// Records a trial's objective at a rung; false when it was recorded
    /// before (the first record stands).
    pub async fn record_rung(
        &self,
        sweep_id: &str,
        record: RungRecord,
    ) -> Result<bool, DatabaseError> {
        let id = sweep_id.to_string();
        self.transaction("record_rung", move |c| {
            let had: i64 = sweep_rungs::table
                .filter(sweep_rungs::sweep_id.eq(&id))
                .filter(sweep_rungs::trial_index.eq(record.trial_index))
                .filter(sweep_rungs::rung.eq(record.rung))
                .count()
                .get_result(c)?;
            if had > 0 {
                return Ok(false);
            }
            let n = diesel::insert_into(sweep_rungs::table)
                .values((
                    sweep_rungs::sweep_id.eq(&id),
                    sweep_rungs::trial_index.eq(record.trial_index),
                    sweep_rungs::rung.eq(record.rung),
                    sweep_rungs::step.eq(record.step),
                    sweep_rungs::value.eq(record.value),
                    sweep_rungs::l0.eq(record.l0),
                ))
                .execute(c)?;
            Ok(n == 1)
        })
        .await
    }

    /// Lifts sweep `sweep_id`'s hold on the QUEUED training `training_id`
    /// with its new pending `reason`; false when that sweep does not hold it.
    pub async fn release_hold(
        &self,
        training_id: &str,
        sweep_id: &str,
        reason: &str,
    ) -> Result<bool, DatabaseError> {
        let (id, sweep, reason) = (
            training_id.to_string(),
            sweep_id.to_string(),
            reason.to_string(),
        );
        self.transaction("release_hold", move |c| {
            let n = diesel::update(
                trainings::table
                    .filter(trainings::id.eq(&id))
                    .filter(trainings::held_by.eq(&sweep))
                    .filter(trainings::state.eq(JobState::Queued.as_str())),
            )
            .set((
                trainings::held_by.eq(""),
                trainings::state_reason.eq(&reason),
            ))
            .execute(c)?;
            Ok(n == 1)
        })
        .await
    }

    /// The newest progress (or program metrics) event of each training.
    pub async fn latest_progress(
        &self,
        training_ids: Vec<String>,
    ) -> Result<HashMap<String, StoredEvent>, DatabaseError> {
        self.read("latest_progress", move |c| {
            let mut out = HashMap::new();
            for id in &training_ids {
                if let Some(e) = super::events::latest_progress_in(c, id)? {
                    out.insert(id.clone(), e);
                }
            }
            Ok(out)
        })
        .await
    }
}
