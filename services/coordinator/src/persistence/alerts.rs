//! Alert rows (raised, then resolved in place) and what the alert rules read
//! from the training history: when each RUNNING training last showed life.

use super::rows::to_db_time;
use super::schema::{alerts, state_transitions, training_events, trainings};
use super::{DatabaseError, Persistence};
use crate::model::JobState;
use crate::model::{Alert, AlertKind, RunningTraining, Severity};
use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::dsl::max;
use diesel::prelude::*;

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = alerts)]
struct AlertRow {
    id: String,
    severity: String,
    kind: String,
    message: String,
    agent_id: Option<String>,
    gpu_uuid: Option<String>,
    training_id: Option<String>,
    value: Option<f64>,
    threshold: Option<f64>,
    raise_time: NaiveDateTime,
    resolve_time: Option<NaiveDateTime>,
}

impl From<&Alert> for AlertRow {
    fn from(a: &Alert) -> Self {
        Self {
            id: a.id.clone(),
            severity: a.severity.as_str().to_string(),
            kind: a.kind.as_str().to_string(),
            message: a.message.clone(),
            agent_id: a.agent_id.clone(),
            gpu_uuid: a.gpu_uuid.clone(),
            training_id: a.training_id.clone(),
            value: a.value,
            threshold: a.threshold,
            raise_time: to_db_time(a.raise_time),
            resolve_time: a.resolve_time.map(to_db_time),
        }
    }
}

impl TryFrom<AlertRow> for Alert {
    type Error = DatabaseError;

    fn try_from(r: AlertRow) -> Result<Self, DatabaseError> {
        let kind = AlertKind::parse(&r.kind)
            .ok_or_else(|| DatabaseError::Corrupt(format!("alerts.kind {:?}", r.kind)))?;
        let severity = Severity::parse(&r.severity)
            .ok_or_else(|| DatabaseError::Corrupt(format!("alerts.severity {:?}", r.severity)))?;
        Ok(Alert {
            id: r.id,
            kind,
            severity,
            message: r.message,
            agent_id: r.agent_id,
            gpu_uuid: r.gpu_uuid,
            training_id: r.training_id,
            value: r.value,
            threshold: r.threshold,
            raise_time: r.raise_time.and_utc(),
            resolve_time: r.resolve_time.map(|t| t.and_utc()),
        })
    }
}

impl Persistence {
    /// Stores a raised alert, or the resolution of a stored one.
    pub async fn record_alert(&self, alert: &Alert) -> Result<(), DatabaseError> {
        let row = AlertRow::from(alert);
        self.transaction("record_alert", move |c| {
            match row.resolve_time {
                Some(at) => {
                    let updated = diesel::update(alerts::table.find(&row.id))
                        .set(alerts::resolve_time.eq(at))
                        .execute(c)?;
                    if updated == 0 {
                        diesel::insert_into(alerts::table).values(&row).execute(c)?;
                    }
                }
                None => {
                    diesel::insert_into(alerts::table).values(&row).execute(c)?;
                }
            }
            Ok(())
        })
        .await
    }

    /// Every alert not resolved, oldest first.
    pub async fn active_alerts(&self) -> Result<Vec<Alert>, DatabaseError> {
        self.read("active_alerts", |c| {
            alerts::table
                .filter(alerts::resolve_time.is_null())
                .order((alerts::raise_time.asc(), alerts::id.asc()))
                .select(AlertRow::as_select())
                .load(c)?
                .into_iter()
                .map(Alert::try_from)
                .collect()
        })
        .await
    }

    /// Alerts resolved at or after `since`, oldest resolution first (at most `limit`).
    pub async fn alerts_resolved_since(
        &self,
        since: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<Alert>, DatabaseError> {
        let since = to_db_time(since);
        self.read("alerts_resolved_since", move |c| {
            alerts::table
                .filter(alerts::resolve_time.ge(since))
                .order((alerts::resolve_time.asc(), alerts::id.asc()))
                .limit(limit.max(0))
                .select(AlertRow::as_select())
                .load(c)?
                .into_iter()
                .map(Alert::try_from)
                .collect()
        })
        .await
    }

    /// Every RUNNING training with the later of its newest progress event and
    /// its newest entry into RUNNING.
    pub async fn running_activity(&self) -> Result<Vec<RunningTraining>, DatabaseError> {
        self.read("running_activity", |c| {
            let ids: Vec<(String, String)> = trainings::table
                .filter(trainings::state.eq(JobState::Running.as_str()))
                .select((trainings::id, trainings::config_json))
                .load(c)?;
            let mut out = Vec::with_capacity(ids.len());
            for (id, config) in ids {
                // The newest by sequence number (the (training_id, seq) index),
                // not MAX(event_time), which reads every event of the training.
                let progress: Option<NaiveDateTime> = training_events::table
                    .filter(training_events::training_id.eq(&id))
                    .filter(training_events::kind.eq_any(["progress", "metrics"]))
                    .order(training_events::seq.desc())
                    .select(training_events::event_time)
                    .first(c)
                    .optional()?;
                let running: Option<NaiveDateTime> = state_transitions::table
                    .filter(state_transitions::training_id.eq(&id))
                    .filter(state_transitions::to_state.eq(JobState::Running.as_str()))
                    .select(max(state_transitions::at))
                    .first(c)?;
                let Some(last) = progress.into_iter().chain(running).max() else {
                    continue;
                };
                let batches_per_step = cohort_spec::TrainingConfig::from_json(&config)
                    .map_or(1, |c| c.optim.accumulation_steps);
                // (a program's config is not an SAE's: one batch per step)
                out.push(RunningTraining {
                    id,
                    last_activity: last.and_utc(),
                    batches_per_step,
                });
            }
            Ok(out)
        })
        .await
    }
}
