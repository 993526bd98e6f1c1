//! Team quotas as the scheduling policy reads them: each team's guarantee,
//! borrow limit and weight ([`crate::policy::shares`]), the coordinator's
//! defaults, and the teams' decayed usage. The anonymous team "" of
//! `--auth none` has no default quota.

use crate::persistence::{DatabaseError, Persistence};
use crate::policy::{Shares, TeamShare};
use std::collections::HashMap;
use std::time::Duration;

/// The coordinator-wide defaults (`--default-team-gpus`, `--max-queued-per-team`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaDefaults {
    /// Guaranteed GPUs of a team without a quota of its own; `None`: no
    /// guarantee (and, while no team has one, no limit).
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

/// Every team's share and decayed usage (halving every `half_life`).
pub async fn load_shares(
    db: &Persistence,
    defaults: QuotaDefaults,
    half_life: Duration,
) -> Result<Shares, DatabaseError> {
    let teams: HashMap<String, TeamShare> = db
        .quotas()
        .await?
        .into_iter()
        .map(|q| {
            let share = TeamShare {
                guarantee: q.gpus.and_then(|g| u32::try_from(g).ok()),
                borrow_limit: q.borrow_limit.and_then(|b| u32::try_from(b).ok()),
                weight: q
                    .weight
                    .filter(|w| w.is_finite() && *w > 0.0)
                    .unwrap_or(1.0),
            };
            (q.team, share)
        })
        .collect();
    let usage = db.team_gpu_seconds(half_life).await?;
    Ok(Shares::new(teams, defaults.team_gpus, usage))
}

/// One team's quota and what it uses, borrows and lends now (ListQuotas).
#[derive(Debug, Clone, PartialEq)]
pub struct TeamShareView {
    pub team: String,
    pub quota: Option<crate::persistence::quotas::TeamQuota>,
    /// GPUs its placed trainings hold.
    pub gpus: i64,
    /// Its QUEUED trainings.
    pub queued: i64,
    /// GPUs it holds beyond its guarantee.
    pub borrowed: i64,
    /// GPUs of its guarantee others use now.
    pub lent: i64,
    /// Its GPU-seconds, decayed.
    pub decayed_gpu_seconds: f64,
}

/// How many GPUs each team lends now: borrowers use first the GPUs nobody
/// is guaranteed, then the idle guarantees, shared in proportion to them.
fn lent(
    idle_guarantee: &HashMap<String, i64>,
    borrowed: i64,
    unguaranteed: i64,
) -> HashMap<String, i64> {
    let from_guarantees = (borrowed - unguaranteed.max(0)).max(0);
    let idle: i64 = idle_guarantee.values().sum();
    if idle == 0 || from_guarantees == 0 {
        return HashMap::new();
    }
    let take = from_guarantees.min(idle);
    idle_guarantee
        .iter()
        .map(|(team, i)| {
            let share = (*i as f64 * take as f64 / idle as f64).round() as i64;
            (team.clone(), share)
        })
        .collect()
}

/// How long the teams' priority caps are used before they are read again.
const CAPS_MAX_AGE: Duration = Duration::from_secs(2);

/// Each team's highest class, and when it was read.
type Caps = Option<(tokio::time::Instant, HashMap<String, String>)>;

/// Each team's highest priority class, as last read.
#[derive(Debug, Clone, Default)]
pub struct ClassCaps {
    kept: std::sync::Arc<std::sync::Mutex<Caps>>,
}

impl super::Jobs {
    /// Every team with a quota, a training or a token: its quota and what it
    /// uses, borrows and lends now.
    pub async fn team_shares(&self) -> Result<Vec<TeamShareView>, DatabaseError> {
        let usage = self.db.team_usage().await?;
        let quotas: HashMap<String, crate::persistence::quotas::TeamQuota> = self
            .db
            .quotas()
            .await?
            .into_iter()
            .map(|q| (q.team.clone(), q))
            .collect();
        let decayed = self
            .db
            .team_gpu_seconds(self.settings.fair_share_half_life)
            .await?;
        let shares = load_shares(
            &self.db,
            self.settings.quotas,
            self.settings.fair_share_half_life,
        )
        .await?;
        let mut teams: Vec<String> = usage.keys().chain(quotas.keys()).cloned().collect();
        teams.sort();
        teams.dedup();
        let guaranteed: i64 = teams
            .iter()
            .filter_map(|t| shares.of(t).guarantee)
            .map(i64::from)
            .sum();
        let fleet = self.fleet.map_gpus(|_, _, _, _| ()).len() as i64;
        let idle: HashMap<String, i64> = teams
            .iter()
            .filter_map(|t| {
                let g = i64::from(shares.of(t).guarantee?);
                let used = usage.get(t).map_or(0, |u| u.gpus);
                Some((t.clone(), (g - used).max(0)))
            })
            .collect();
        // A team borrows what it holds beyond its guarantee (all it holds,
        // without one, once anyone has one).
        let borrowed: HashMap<String, i64> = teams
            .iter()
            .filter_map(|t| {
                let guaranteed = i64::from(shares.guaranteed(t)?);
                let used = usage.get(t).map_or(0, |u| u.gpus);
                Some((t.clone(), (used - guaranteed).max(0)))
            })
            .collect();
        let total_borrowed: i64 = borrowed.values().sum();
        let lent = lent(&idle, total_borrowed, fleet - guaranteed);
        Ok(teams
            .into_iter()
            .map(|team| {
                let used = usage.get(&team).copied().unwrap_or_default();
                TeamShareView {
                    quota: quotas.get(&team).cloned(),
                    gpus: used.gpus,
                    queued: used.queued,
                    borrowed: borrowed.get(&team).copied().unwrap_or(0),
                    lent: lent.get(&team).copied().unwrap_or(0),
                    decayed_gpu_seconds: decayed.get(&team).copied().unwrap_or(0.0),
                    team,
                }
            })
            .collect())
    }

    /// The highest priority class `team` may use, when capped (read again
    /// after [`CAPS_MAX_AGE`] or a quota change).
    pub async fn max_class(&self, team: &str) -> Result<Option<String>, DatabaseError> {
        {
            let kept = self
                .caps
                .kept
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some((_, caps)) = kept.as_ref().filter(|(at, _)| at.elapsed() < CAPS_MAX_AGE) {
                return Ok(caps.get(team).cloned());
            }
        }
        let caps: HashMap<String, String> = self
            .db
            .quotas()
            .await?
            .into_iter()
            .filter_map(|q| Some((q.team, q.max_priority_class?)))
            .collect();
        let cap = caps.get(team).cloned();
        *self
            .caps
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some((tokio::time::Instant::now(), caps));
        Ok(cap)
    }

    /// A quota changed: the caps are read again at the next create.
    pub fn quota_changed(&self) {
        *self
            .caps
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn borrowers_use_the_unguaranteed_gpus_first_then_idle_guarantees() {
        let idle: HashMap<String, i64> = [("a".to_string(), 6), ("b".to_string(), 2)].into();
        // 4 borrowed, 4 GPUs nobody is guaranteed: nothing lent.
        assert!(lent(&idle, 4, 4).is_empty());
        // 8 borrowed: 4 from the guarantees, in proportion 6:2.
        let l = lent(&idle, 8, 4);
        assert_eq!((l["a"], l["b"]), (3, 1));
        // More borrowed than idle: all the idle is lent.
        let l = lent(&idle, 20, 0);
        assert_eq!((l["a"], l["b"]), (6, 2));
    }
}
