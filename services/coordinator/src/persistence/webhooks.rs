//! Webhooks (`webhooks`): a team's endpoints, their events, body format
//! and signing secret; adding and removing write their audit row in the
//! same transaction. And what they announce: the state transitions after a
//! cursor (`state_transitions`' increasing id), with their training's team,
//! name and labels.

use super::audit::insert_in;
use super::rows::{from_db_time, now, to_db_time};
use super::schema::{state_transitions, trainings, webhooks};
use super::{DatabaseError, Persistence};
use crate::model::AuditEntry;
use chrono::{DateTime, Utc};
use diesel::prelude::*;

/// The most webhooks one team may have.
pub const MAX_PER_TEAM: i64 = 20;

/// A stored webhook.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookRecord {
    pub id: String,
    pub team: String,
    pub url: String,
    /// `ended`, `failed`, `preempted`, `alert`.
    pub events: Vec<String>,
    /// `json` or `slack`.
    pub format: String,
    pub secret: String,
    pub creator: String,
    pub create_time: DateTime<Utc>,
}

/// What [`Persistence::add_webhook`] stores.
#[derive(Debug, Clone)]
pub struct NewWebhook {
    pub team: String,
    pub url: String,
    pub events: Vec<String>,
    pub format: String,
    pub secret: String,
    pub creator: String,
    pub audit: AuditEntry,
}

/// What adding did.
#[derive(Debug)]
pub enum Added {
    Done(WebhookRecord),
    /// The team has [`MAX_PER_TEAM`] already: nothing stored.
    Full,
}

type Row = (
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    chrono::NaiveDateTime,
);

fn select() -> (
    webhooks::id,
    webhooks::team,
    webhooks::url,
    webhooks::events,
    webhooks::format,
    webhooks::secret,
    webhooks::creator,
    webhooks::create_time,
) {
    (
        webhooks::id,
        webhooks::team,
        webhooks::url,
        webhooks::events,
        webhooks::format,
        webhooks::secret,
        webhooks::creator,
        webhooks::create_time,
    )
}

fn record(row: Row) -> WebhookRecord {
    let (id, team, url, events, format, secret, creator, created) = row;
    WebhookRecord {
        id,
        team,
        url,
        events: events.split(',').map(str::to_string).collect(),
        format,
        secret,
        creator,
        create_time: from_db_time(created),
    }
}

type TransitionRow = (
    i64,
    String,
    String,
    String,
    String,
    i32,
    String,
    String,
    chrono::NaiveDateTime,
);

/// A state transition a webhook may announce.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// Increasing across all trainings (the cursor).
    pub id: i64,
    pub training_id: String,
    pub team: String,
    pub display_name: String,
    pub labels_json: String,
    pub attempt: i32,
    pub to_state: String,
    pub reason: String,
    pub at: DateTime<Utc>,
}

impl Persistence {
    /// Stores a webhook, unless its team has [`MAX_PER_TEAM`].
    pub async fn add_webhook(&self, new: NewWebhook) -> Result<Added, DatabaseError> {
        self.transaction("add_webhook", move |c| {
            let at = now();
            let count: i64 = webhooks::table
                .filter(webhooks::team.eq(&new.team))
                .count()
                .get_result(c)?;
            if count >= MAX_PER_TEAM {
                return Ok(Added::Full);
            }
            let id = format!("whk-{}", uuid::Uuid::new_v4().simple());
            diesel::insert_into(webhooks::table)
                .values((
                    webhooks::id.eq(&id),
                    webhooks::team.eq(&new.team),
                    webhooks::url.eq(&new.url),
                    webhooks::events.eq(new.events.join(",")),
                    webhooks::format.eq(&new.format),
                    webhooks::secret.eq(&new.secret),
                    webhooks::creator.eq(&new.creator),
                    webhooks::create_time.eq(to_db_time(at)),
                ))
                .execute(c)?;
            let mut audit = new.audit.clone();
            audit.target = id.clone();
            insert_in(c, &audit, at)?;
            let row: Row = webhooks::table.find(&id).select(select()).first(c)?;
            Ok(Added::Done(record(row)))
        })
        .await
    }

    /// A team's webhooks (every team's with `None`), oldest first; at most
    /// [`MAX_PER_TEAM`] per team, so bounded by the teams.
    pub async fn webhooks(&self, team: Option<&str>) -> Result<Vec<WebhookRecord>, DatabaseError> {
        let team = team.map(str::to_string);
        self.read("webhooks", move |c| {
            let mut query = webhooks::table.select(select()).into_boxed();
            if let Some(team) = &team {
                query = query.filter(webhooks::team.eq(team.clone()));
            }
            let rows: Vec<Row> = query
                .order((
                    webhooks::team.asc(),
                    webhooks::create_time.asc(),
                    webhooks::id.asc(),
                ))
                .load(c)?;
            Ok(rows.into_iter().map(record).collect())
        })
        .await
    }

    /// Removes webhook `id` of `team` (any team's with `None`); `None` when
    /// there is no such webhook (nothing written).
    pub async fn remove_webhook(
        &self,
        id: &str,
        team: Option<&str>,
        audit: AuditEntry,
    ) -> Result<Option<WebhookRecord>, DatabaseError> {
        let (id, team) = (id.to_string(), team.map(str::to_string));
        self.transaction("remove_webhook", move |c| {
            let found: Option<Row> = webhooks::table
                .find(&id)
                .select(select())
                .first(c)
                .optional()?;
            let Some(found) = found.map(record) else {
                return Ok(None);
            };
            if team.as_ref().is_some_and(|t| *t != found.team) {
                return Ok(None);
            }
            diesel::delete(webhooks::table.find(&id)).execute(c)?;
            let mut audit = audit.clone();
            audit.target_team = found.team.clone();
            insert_in(c, &audit, now())?;
            Ok(Some(found))
        })
        .await
    }

    /// The newest state transition's id (0 with none): where announcing
    /// starts.
    pub async fn last_transition_id(&self) -> Result<i64, DatabaseError> {
        self.read("last_transition_id", |c| {
            let max: Option<i64> = state_transitions::table
                .select(diesel::dsl::max(state_transitions::id))
                .first(c)?;
            Ok(max.unwrap_or(0))
        })
        .await
    }

    /// The state transitions after `cursor`, in order, at most `limit`.
    pub async fn transitions_after(
        &self,
        cursor: i64,
        limit: i64,
    ) -> Result<Vec<Transition>, DatabaseError> {
        self.read("transitions_after", move |c| {
            let rows: Vec<TransitionRow> = state_transitions::table
                .inner_join(trainings::table)
                .filter(state_transitions::id.gt(cursor))
                .order(state_transitions::id.asc())
                .limit(limit.max(0))
                .select((
                    state_transitions::id,
                    state_transitions::training_id,
                    trainings::team,
                    trainings::display_name,
                    trainings::labels_json,
                    state_transitions::attempt,
                    state_transitions::to_state,
                    state_transitions::reason,
                    state_transitions::at,
                ))
                .load(c)?;
            Ok(rows
                .into_iter()
                .map(
                    |(
                        id,
                        training_id,
                        team,
                        display_name,
                        labels_json,
                        attempt,
                        to_state,
                        reason,
                        at,
                    )| {
                        Transition {
                            id,
                            training_id,
                            team,
                            display_name,
                            labels_json,
                            attempt,
                            to_state,
                            reason,
                            at: from_db_time(at),
                        }
                    },
                )
                .collect())
        })
        .await
    }
}
