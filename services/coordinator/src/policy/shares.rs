//! Quotas as guarantees that lend (Kueue's cohorts) and fair share by
//! decayed usage (Slurm's).
//!
//! A team's GPU quota is its **guarantee**. With a `borrow_limit` it may use
//! up to that many GPUs more while others' guarantees sit idle; those
//! trainings are **borrowing** and are reclaimed (preempted with a notice)
//! when a team with unused guarantee needs its GPUs back. A team with a
//! quota and no borrow limit borrows nothing (a hard cap, as before). A
//! team without a quota has no guarantee: once any team has one, all it
//! runs is borrowed. Borrowers are served by fair share: the team with the
//! least decayed usage per weight first.

use std::collections::HashMap;
use std::time::Duration;

/// One team's share of the fleet.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TeamShare {
    /// GPUs the team is guaranteed (its quota); `None`: no quota.
    pub guarantee: Option<u32>,
    /// GPUs beyond the guarantee it may borrow; `None`: none.
    pub borrow_limit: Option<u32>,
    /// Its weight in fair share (> 0; default 1).
    pub weight: f64,
}

impl Default for TeamShare {
    fn default() -> Self {
        Self {
            guarantee: None,
            borrow_limit: None,
            weight: 1.0,
        }
    }
}

/// Whether a training may take `n` more GPUs for its team.
#[derive(Debug, Clone, PartialEq)]
pub enum Admission {
    /// Within the team's guarantee (or no quotas apply).
    Within,
    /// Beyond the guarantee, within the borrow limit: it runs on idle GPUs
    /// of others' guarantees and may be reclaimed.
    Borrow,
    /// Over what the team may use: the pending reason.
    Over(String),
}

/// Every team's share and usage, as one scheduling pass sees them.
#[derive(Debug, Clone, Default)]
pub struct Shares {
    teams: HashMap<String, TeamShare>,
    /// `--default-team-gpus`: the guarantee of a team without a quota.
    default_guarantee: Option<u32>,
    /// GPU-seconds used, decayed with the half-life, by team.
    usage: HashMap<String, f64>,
}

impl Shares {
    pub fn new(
        teams: HashMap<String, TeamShare>,
        default_guarantee: Option<u32>,
        usage: HashMap<String, f64>,
    ) -> Self {
        Self {
            teams,
            default_guarantee,
            usage,
        }
    }

    /// The team's share: its own, else the default guarantee (never for
    /// the anonymous team "" of `--auth none`).
    pub fn of(&self, team: &str) -> TeamShare {
        match self.teams.get(team) {
            Some(own) => *own,
            None if team.is_empty() => TeamShare::default(),
            None => TeamShare {
                guarantee: self.default_guarantee,
                ..TeamShare::default()
            },
        }
    }

    /// Whether any team is guaranteed GPUs: only then is anything borrowed.
    pub fn any_guarantee(&self) -> bool {
        self.default_guarantee.is_some() || self.teams.values().any(|t| t.guarantee.is_some())
    }

    /// The GPUs a team may hold without borrowing: its guarantee; a team
    /// without one, none while others have one (else any number).
    pub fn guaranteed(&self, team: &str) -> Option<u32> {
        match self.of(team).guarantee {
            Some(g) => Some(g),
            None if self.any_guarantee() => Some(0),
            None => None,
        }
    }

    /// Whether `team`, holding `held` GPUs, may take `need` more for a
    /// training that may (`borrow`) or may not borrow; `lending` off keeps
    /// quotas hard caps and never borrows.
    pub fn admit(
        &self,
        team: &str,
        held: i64,
        need: i64,
        borrow: bool,
        lending: bool,
    ) -> Admission {
        let share = self.of(team);
        let after = held.saturating_add(need);
        let Some(guarantee) = share.guarantee else {
            // No quota: unlimited without lending (as before); with it, all
            // it runs is borrowed once anyone has a guarantee.
            return if !lending || !self.any_guarantee() {
                Admission::Within
            } else if borrow {
                Admission::Borrow
            } else {
                Admission::Over(format!(
                    "{}: team {team} has no guaranteed GPUs and this training does not borrow",
                    cohort_proto::error::Reason::QuotaExceeded
                ))
            };
        };
        let guarantee = i64::from(guarantee);
        if after <= guarantee {
            return Admission::Within;
        }
        let limit = if lending && borrow {
            share.borrow_limit.map_or(0, i64::from)
        } else {
            0
        };
        if limit > 0 && after <= guarantee + limit {
            return Admission::Borrow;
        }
        let why = if limit > 0 {
            format!("its {guarantee} guaranteed GPUs and {limit} it may borrow")
        } else {
            format!("its {guarantee} GPUs")
        };
        Admission::Over(format!(
            "{}: team {team} holds {held} of {why}; this training needs {need}",
            cohort_proto::error::Reason::QuotaExceeded
        ))
    }

    /// The team's decayed usage per weight: lower is served first.
    pub fn fair_share_key(&self, team: &str) -> f64 {
        let weight = self.of(team).weight;
        let weight = if weight.is_finite() && weight > 0.0 {
            weight
        } else {
            1.0
        };
        self.usage.get(team).copied().unwrap_or(0.0) / weight
    }

    /// The decayed GPU-seconds of `team`.
    pub fn usage(&self, team: &str) -> f64 {
        self.usage.get(team).copied().unwrap_or(0.0)
    }

    /// Ages every team's usage by `elapsed` and adds what each holds over
    /// it (see [`decay`]).
    pub fn accrue(&mut self, held: &HashMap<String, i64>, elapsed: Duration, half_life: Duration) {
        for value in self.usage.values_mut() {
            *value = decay(*value, 0, elapsed, half_life);
        }
        for (team, gpus) in held {
            if *gpus > 0 {
                *self.usage.entry(team.clone()).or_default() +=
                    *gpus as f64 * elapsed.as_secs_f64();
            }
        }
    }
}

/// Usage `value` (GPU-seconds) `elapsed` later, with `gpus` held all along:
/// what it was, halved every `half_life`, plus the GPU-seconds since.
pub fn decay(value: f64, gpus: i64, elapsed: Duration, half_life: Duration) -> f64 {
    let half = half_life.as_secs_f64();
    let factor = if half > 0.0 {
        0.5f64.powf(elapsed.as_secs_f64() / half)
    } else {
        0.0
    };
    value * factor + gpus.max(0) as f64 * elapsed.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shares() -> Shares {
        let teams = [
            (
                "vision".to_string(),
                TeamShare {
                    guarantee: Some(8),
                    borrow_limit: Some(8),
                    weight: 2.0,
                },
            ),
            (
                "nlp".to_string(),
                TeamShare {
                    guarantee: Some(4),
                    borrow_limit: None,
                    weight: 1.0,
                },
            ),
        ];
        Shares::new(
            teams.into(),
            None,
            [("vision".to_string(), 200.0), ("nlp".to_string(), 150.0)].into(),
        )
    }

    #[test]
    fn guarantees_lend_within_the_borrow_limit() {
        let s = shares();
        assert_eq!(s.admit("vision", 4, 4, true, true), Admission::Within);
        assert_eq!(s.admit("vision", 4, 8, true, true), Admission::Borrow);
        assert!(matches!(
            s.admit("vision", 4, 13, true, true),
            Admission::Over(_)
        ));
        // A training that does not borrow stays within the guarantee.
        assert!(matches!(
            s.admit("vision", 4, 8, false, true),
            Admission::Over(_)
        ));
        // Lending off: the quota is a hard cap.
        assert!(matches!(
            s.admit("vision", 4, 8, true, false),
            Admission::Over(_)
        ));
        // No borrow limit: a hard cap, with today's reason.
        let Admission::Over(why) = s.admit("nlp", 3, 2, true, true) else {
            panic!("over")
        };
        assert_eq!(
            why,
            "QUOTA_EXCEEDED: team nlp holds 3 of its 4 GPUs; this training needs 2"
        );
        // A team without a quota borrows everything once guarantees exist.
        assert_eq!(s.admit("other", 0, 64, true, true), Admission::Borrow);
        assert_eq!(s.admit("other", 0, 64, true, false), Admission::Within);
        assert_eq!(s.guaranteed("other"), Some(0));
        // Without any guarantee nobody borrows.
        let none = Shares::default();
        assert_eq!(none.admit("x", 100, 100, true, true), Admission::Within);
        assert_eq!(none.guaranteed("x"), None);
    }

    #[test]
    fn fair_share_is_usage_per_weight_and_decays_by_half_lives() {
        let s = shares();
        assert_eq!(s.fair_share_key("vision"), 100.0);
        assert_eq!(s.fair_share_key("nlp"), 150.0);
        let day = Duration::from_secs(86_400);
        assert!((decay(100.0, 0, day, day) - 50.0).abs() < 1e-9);
        assert!((decay(0.0, 2, Duration::from_secs(10), day) - 20.0).abs() < 1e-9);
        let mut s = shares();
        s.accrue(&[("nlp".to_string(), 2)].into(), day, day);
        assert!((s.usage("vision") - 100.0).abs() < 1e-9);
        assert!((s.usage("nlp") - (75.0 + 2.0 * 86_400.0)).abs() < 1e-6);
    }
}
