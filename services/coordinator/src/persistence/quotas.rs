//! Team quotas (guaranteed GPUs, what may be borrowed beyond them, the
//! fair-share weight, the highest priority class, queued trainings at once)
//! and what each team uses now. Setting a quota writes its audit row in the
//! same transaction.

use super::audit::insert_in;
use super::rows::{now, to_db_time};
use super::schema::{team_quotas, tokens, trainings};
use super::{DatabaseError, Persistence};
use crate::model::{AuditEntry, JobState};
use diesel::prelude::*;
use std::collections::BTreeMap;

/// A team's limits; `None`: the coordinator's default.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TeamQuota {
    pub team: String,
    /// Its guaranteed GPUs.
    pub gpus: Option<i32>,
    pub max_queued: Option<i32>,
    /// GPUs beyond the guarantee it may borrow (none: it borrows nothing).
    pub borrow_limit: Option<i32>,
    /// Its fair-share weight (none: 1).
    pub weight: Option<f64>,
    /// The highest priority class its trainings may use (none: any).
    pub max_priority_class: Option<String>,
}

type QuotaRow = (
    String,
    Option<i32>,
    Option<i32>,
    Option<i32>,
    Option<f64>,
    Option<String>,
);

fn quota_of(row: QuotaRow) -> TeamQuota {
    let (team, gpus, max_queued, borrow_limit, weight, max_priority_class) = row;
    TeamQuota {
        team,
        gpus,
        max_queued,
        borrow_limit,
        weight,
        max_priority_class,
    }
}

/// What a team's trainings use now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TeamUsage {
    /// GPUs held by its placed trainings (SCHEDULED, RUNNING, RESTARTING).
    pub gpus: i64,
    /// Its QUEUED trainings.
    pub queued: i64,
}

/// States whose trainings hold (or are about to take back) their GPUs.
const HOLDING: [JobState; 3] = [JobState::Scheduled, JobState::Running, JobState::Restarting];

impl Persistence {
    /// Sets `quota`, replacing the team's last one.
    pub async fn set_quota(
        &self,
        quota: TeamQuota,
        audit: Option<AuditEntry>,
    ) -> Result<TeamQuota, DatabaseError> {
        self.transaction("set_quota", move |c| {
            let at = now();
            diesel::delete(team_quotas::table.find(&quota.team)).execute(c)?;
            diesel::insert_into(team_quotas::table)
                .values((
                    team_quotas::team.eq(&quota.team),
                    team_quotas::gpus.eq(quota.gpus),
                    team_quotas::max_queued.eq(quota.max_queued),
                    team_quotas::borrow_limit.eq(quota.borrow_limit),
                    team_quotas::weight.eq(quota.weight),
                    team_quotas::max_priority_class.eq(&quota.max_priority_class),
                    team_quotas::update_time.eq(to_db_time(at)),
                ))
                .execute(c)?;
            if let Some(audit) = &audit {
                insert_in(c, audit, at)?;
            }
            Ok(quota.clone())
        })
        .await
    }

    /// One team's quota row, if it has one.
    pub async fn quota(&self, team: &str) -> Result<Option<TeamQuota>, DatabaseError> {
        let team = team.to_string();
        self.read("quota", move |c| {
            let row: Option<QuotaRow> = team_quotas::table
                .find(&team)
                .select((
                    team_quotas::team,
                    team_quotas::gpus,
                    team_quotas::max_queued,
                    team_quotas::borrow_limit,
                    team_quotas::weight,
                    team_quotas::max_priority_class,
                ))
                .first(c)
                .optional()?;
            Ok(row.map(quota_of))
        })
        .await
    }

    /// Every team's quota row.
    pub async fn quotas(&self) -> Result<Vec<TeamQuota>, DatabaseError> {
        self.read("quotas", |c| {
            let rows: Vec<QuotaRow> = team_quotas::table
                .order(team_quotas::team.asc())
                .select((
                    team_quotas::team,
                    team_quotas::gpus,
                    team_quotas::max_queued,
                    team_quotas::borrow_limit,
                    team_quotas::weight,
                    team_quotas::max_priority_class,
                ))
                .load(c)?;
            Ok(rows.into_iter().map(quota_of).collect())
        })
        .await
    }

    /// What every team with a training or a token uses now (teams with
    /// neither are left out), by team.
    pub async fn team_usage(&self) -> Result<BTreeMap<String, TeamUsage>, DatabaseError> {
        self.read("team_usage", |c| {
            let holding: Vec<&str> = HOLDING.iter().map(|s| s.as_str()).collect();
            let gpus: Vec<(String, Option<i64>)> = trainings::table
                .filter(trainings::state.eq_any(holding))
                .group_by(trainings::team)
                .select((trainings::team, diesel::dsl::sum(trainings::world_size)))
                .load(c)?;
            let queued: Vec<(String, i64)> = trainings::table
                .filter(trainings::state.eq(JobState::Queued.as_str()))
                .group_by(trainings::team)
                .select((trainings::team, diesel::dsl::count_star()))
                .load(c)?;
            let teams: Vec<String> = tokens::table.select(tokens::team).distinct().load(c)?;
            let mut usage: BTreeMap<String, TeamUsage> = BTreeMap::new();
            for team in teams {
                usage.entry(team).or_default();
            }
            for (team, n) in gpus {
                usage.entry(team).or_default().gpus = n.unwrap_or(0);
            }
            for (team, n) in queued {
                usage.entry(team).or_default().queued = n;
            }
            Ok(usage)
        })
        .await
    }
}
