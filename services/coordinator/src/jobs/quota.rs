//! Team quotas in scheduling. A team may hold at most its quota of GPUs at
//! once (its own, else `--default-team-gpus`, else no limit); a training
//! that would go over stays QUEUED with reason QUOTA_EXCEEDED while other
//! teams' trainings behind it are placed. Idle quota is not lent to other
//! teams: there is no borrowing, so nothing ever needs reclaiming.
//! The anonymous team "" of `--auth none` has no default quota.

use crate::persistence::quotas::TeamUsage;
use crate::persistence::{DatabaseError, Persistence};
use cohort_proto::error::reason;
use std::collections::{BTreeMap, HashMap};

/// The coordinator-wide defaults (`--default-team-gpus`, `--max-queued-per-team`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaDefaults {
    /// GPUs at once for a team without a quota of its own; `None`: unlimited.
    pub team_gpus: Option<u32>,
    /// QUEUED trainings at once for a team without a cap of its own.
    pub max_queued: u32,
}

impl Default for QuotaDefaults {
    fn default() -> Self {
        Self {
            team_gpus: None,
            max_queued: 1000,
        }
    }
}

/// One scheduling pass's ledger: every team's GPU limit and what it holds,
/// updated as the pass places trainings.
#[derive(Debug, Default)]
pub struct QuotaBook {
    limits: HashMap<String, Option<i64>>,
    default_gpus: Option<i64>,
    used: BTreeMap<String, TeamUsage>,
}

impl QuotaBook {
    pub async fn load(db: &Persistence, defaults: QuotaDefaults) -> Result<Self, DatabaseError> {
        let limits = db
            .quotas()
            .await?
            .into_iter()
            .map(|q| (q.team, q.gpus.map(i64::from)))
            .collect();
        Ok(Self {
            limits,
            default_gpus: defaults.team_gpus.map(i64::from),
            used: db.team_usage().await?,
        })
    }

    /// The team's GPU limit, if it has one.
    pub fn limit(&self, team: &str) -> Option<i64> {
        match self.limits.get(team) {
            Some(own) => *own,
            None if team.is_empty() => None,
            None => self.default_gpus,
        }
    }

    /// The pending reason when `need` more GPUs would take `team` past its quota.
    pub fn exceeded(&self, team: &str, need: usize) -> Option<String> {
        let limit = self.limit(team)?;
        let held = self.used.get(team).map_or(0, |u| u.gpus);
        let need = i64::try_from(need).unwrap_or(i64::MAX);
        (held.saturating_add(need) > limit).then(|| {
            format!(
                "{}: team {team} holds {held} of its {limit} GPUs; this training needs {need}",
                reason::QUOTA_EXCEEDED
            )
        })
    }

    /// Records `n` GPUs placed for `team`.
    pub fn take(&mut self, team: &str, n: usize) {
        self.used.entry(team.to_string()).or_default().gpus += n as i64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn book(
        limits: &[(&str, Option<i64>)],
        default: Option<i64>,
        held: &[(&str, i64)],
    ) -> QuotaBook {
        QuotaBook {
            limits: limits.iter().map(|(t, l)| (t.to_string(), *l)).collect(),
            default_gpus: default,
            used: held
                .iter()
                .map(|(t, g)| {
                    (
                        t.to_string(),
                        TeamUsage {
                            gpus: *g,
                            queued: 0,
                        },
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn a_team_goes_over_its_own_quota_else_the_default_and_anonymous_never() {
        let mut b = book(&[("a", Some(4)), ("free", None)], Some(2), &[("a", 3)]);
        assert_eq!(b.exceeded("a", 1), None);
        let why = b.exceeded("a", 2).unwrap();
        assert!(
            why.starts_with("QUOTA_EXCEEDED: team a holds 3 of its 4 GPUs"),
            "{why}"
        );
        // Own row without a GPU limit: unlimited despite the default.
        assert_eq!(b.exceeded("free", 100), None);
        // No row: the default.
        assert!(b.exceeded("b", 3).is_some() && b.exceeded("b", 2).is_none());
        assert_eq!(b.exceeded("", 100), None);
        // Placements in the pass count at once.
        b.take("b", 2);
        assert!(b.exceeded("b", 1).is_some());
    }
}
