//! Notices given to a placed attempt's ranks (a preemption, a reclaim or a
//! drain): written with the decision and its audit row, read by every
//! scheduling pass (its gang is stopping), and closed exactly once when the
//! gang is gone — the training back in the queue (or moving, for a drain)
//! with its `preempted` event, in one transaction that only the first
//! closer of the notice row gets to write. A coordinator that takes over
//! finds the notice here and finishes what the last one began.

use super::audit::insert_in;
use super::events::append_event_in;
use super::rows::{from_db_time, now, to_db_time};
use super::schema::{training_notices, trainings};
use super::trainings::{load_training, transition_in};
use super::{DatabaseError, Persistence};
use crate::model::{AuditEntry, EventPayload, JobState, Preempted, Training};
use crate::policy::NoticeKind;
use chrono::{DateTime, Utc};
use diesel::prelude::*;

/// A notice in force.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    pub training_id: String,
    /// The attempt whose ranks got it.
    pub attempt: i32,
    pub kind: NoticeKind,
    /// The training it makes room for (a drained agent's name for a drain).
    pub by: String,
    /// The state reason the training's end of this attempt carries.
    pub reason: String,
    pub time: DateTime<Utc>,
    /// When its ranks are killed if still there.
    pub deadline: DateTime<Utc>,
}

/// How a noticed attempt ends, once its gang is gone.
#[derive(Debug, Clone)]
pub struct NoticeEnd {
    pub training_id: String,
    pub attempt: i32,
    /// QUEUED (preempted, reclaimed) or RESTARTING (moved off a drained agent).
    pub to: JobState,
    /// The state reason it goes there with.
    pub reason: String,
    pub event: Preempted,
}

/// A `training_notices` row, its columns in the table's order.
type NoticeRow = (
    String,
    i32,
    String,
    String,
    String,
    chrono::NaiveDateTime,
    chrono::NaiveDateTime,
);

fn notice(row: NoticeRow) -> Result<Notice, DatabaseError> {
    let (training_id, attempt, kind, by, reason, time, deadline) = row;
    let kind = NoticeKind::parse(&kind)
        .ok_or_else(|| DatabaseError::Corrupt(format!("training_notices.kind {kind:?}")))?;
    Ok(Notice {
        training_id,
        attempt,
        kind,
        by,
        reason,
        time: from_db_time(time),
        deadline: from_db_time(deadline),
    })
}

impl Persistence {
    /// Gives `notice` (its audit row in the same transaction), setting the
    /// training's reason to `stopping_reason` while it stops. False when
    /// the attempt is no longer placed or has a notice already: nothing is
    /// written then.
    pub async fn give_notice(
        &self,
        notice: Notice,
        stopping_reason: String,
        audit: AuditEntry,
    ) -> Result<bool, DatabaseError> {
        self.transaction("give_notice", move |c| {
            let Some(t) = load_training(c, &notice.training_id)? else {
                return Ok(false);
            };
            let placed = matches!(t.state, JobState::Scheduled | JobState::Running);
            if !placed || t.attempt != notice.attempt {
                return Ok(false);
            }
            let existing: i64 = training_notices::table
                .filter(training_notices::training_id.eq(&notice.training_id))
                .count()
                .get_result(c)?;
            if existing > 0 {
                return Ok(false);
            }
            diesel::insert_into(training_notices::table)
                .values((
                    training_notices::training_id.eq(&notice.training_id),
                    training_notices::attempt.eq(notice.attempt),
                    training_notices::kind.eq(notice.kind.as_str()),
                    training_notices::noticed_by.eq(&notice.by),
                    training_notices::reason.eq(&notice.reason),
                    training_notices::notice_time.eq(to_db_time(notice.time)),
                    training_notices::deadline.eq(to_db_time(notice.deadline)),
                ))
                .execute(c)?;
            diesel::update(trainings::table.filter(trainings::id.eq(&notice.training_id)))
                .set(trainings::state_reason.eq(&stopping_reason))
                .execute(c)?;
            insert_in(c, &audit, now())?;
            Ok(true)
        })
        .await
    }

    /// Every notice in force.
    pub async fn notices(&self) -> Result<Vec<Notice>, DatabaseError> {
        self.read("notices", |c| {
            training_notices::table
                .select(training_notices::all_columns)
                .load::<NoticeRow>(c)?
                .into_iter()
                .map(notice)
                .collect()
        })
        .await
    }

    /// The notice given to `training_id`'s current ranks, if any.
    pub async fn notice_of(&self, training_id: &str) -> Result<Option<Notice>, DatabaseError> {
        let id = training_id.to_string();
        self.read("notice_of", move |c| {
            training_notices::table
                .filter(training_notices::training_id.eq(&id))
                .select(training_notices::all_columns)
                .first::<NoticeRow>(c)
                .optional()?
                .map(notice)
                .transpose()
        })
        .await
    }

    /// Closes the notice of `end`'s attempt: the training goes to `end.to`
    /// with the notice's reason, a preemption (not a drain) counted, its
    /// `preempted` event written — all or nothing, and only by the first
    /// closer (`None` for any other, or once the attempt moved on).
    pub async fn close_notice(&self, end: NoticeEnd) -> Result<Option<Training>, DatabaseError> {
        self.transaction_noting("close_notice", move |c, out| {
            let row: Option<NoticeRow> = training_notices::table
                .filter(training_notices::training_id.eq(&end.training_id))
                .filter(training_notices::attempt.eq(end.attempt))
                .select(training_notices::all_columns)
                .first(c)
                .optional()?;
            let Some(n) = row.map(notice).transpose()? else {
                return Ok(None);
            };
            let deleted = diesel::delete(
                training_notices::table
                    .filter(training_notices::training_id.eq(&end.training_id))
                    .filter(training_notices::attempt.eq(end.attempt)),
            )
            .execute(c)?;
            if deleted != 1 {
                return Err(DatabaseError::Conflict(format!(
                    "notice of training {}",
                    end.training_id
                )));
            }
            let Some(t) = load_training(c, &end.training_id)? else {
                return Ok(None);
            };
            if t.attempt != end.attempt
                || !matches!(t.state, JobState::Scheduled | JobState::Running)
            {
                return Ok(None); // it ended otherwise (cancelled, failed): the notice just goes
            }
            transition_in(c, out, &end.training_id, end.to, &end.reason)?;
            let this = trainings::table.filter(trainings::id.eq(&end.training_id));
            match n.kind {
                NoticeKind::Preempt | NoticeKind::Reclaim => {
                    diesel::update(this)
                        .set(trainings::preemption_count.eq(trainings::preemption_count + 1))
                        .execute(c)?;
                }
                // Held back until its sweep promotes it.
                NoticeKind::Pause => {
                    diesel::update(this)
                        .set(trainings::held_by.eq(&n.by))
                        .execute(c)?;
                }
                NoticeKind::Resize => {
                    diesel::update(this)
                        .set(trainings::resize_count.eq(trainings::resize_count + 1))
                        .execute(c)?;
                }
                NoticeKind::Drain => {}
            }
            if end.event.checkpointed {
                diesel::update(this)
                    .set(trainings::notice_saves.eq(true))
                    .execute(c)?;
            }
            // A resize is not a preemption: its `resized` event comes when
            // the new gang is placed.
            if n.kind != NoticeKind::Resize {
                append_event_in(
                    c,
                    out,
                    &end.training_id,
                    end.attempt,
                    &EventPayload::Preempted(end.event.clone()),
                    now(),
                )?;
            }
            load_training(c, &end.training_id)
        })
        .await
    }

    /// Drops the notice of a training whose attempt ended otherwise.
    pub async fn drop_notice(&self, training_id: &str) -> Result<(), DatabaseError> {
        let id = training_id.to_string();
        self.transaction("drop_notice", move |c| {
            diesel::delete(training_notices::table.filter(training_notices::training_id.eq(&id)))
                .execute(c)?;
            Ok(())
        })
        .await
    }
}
