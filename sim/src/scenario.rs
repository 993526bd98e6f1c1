//! What one simulated run is: a policy (with its features switched on or
//! off) and the teams' quotas.
//!
//! Policies: `fifo-backfill` (the queue before fleet sharing: priorities
//! that age, backfill, the oldest training's reservation; no preemption,
//! no lending, and no quotas, so nothing caps its use of the fleet) and
//! `sharing` (this policy: preemption, guarantees that lend, fair share).
//! Either takes modifiers after a colon: `sharing:no-preemption`,
//! `sharing:no-lending`, `sharing:no-fair-share`, `fifo-backfill:hard-caps`
//! (the quotas as hard caps, as before fleet sharing), `sharing:elastic`
//! (the trace's multi-GPU jobs ask for a range of sizes instead of a count:
//! docs/scheduling.md, "Elastic trainings").

use cohort_coordinator::policy::{Policy, Shares, TeamShare};
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

/// One policy to run.
#[derive(Debug, Clone)]
pub struct PolicyRun {
    /// As written on the command line.
    pub name: String,
    pub policy: Policy,
    /// The quotas are in force (else guarantees are only what the
    /// "time to guaranteed GPUs" figure measures against).
    pub quotas: bool,
    /// Jobs that save on notice ask for a range of sizes, from their
    /// `min_gpus` (half their size when the trace gives none) to `gpus`.
    pub elastic: bool,
}

impl PolicyRun {
    pub fn parse(text: &str, min_runtime: Duration) -> Result<Self, String> {
        let mut parts = text.split(':');
        let base = parts.next().unwrap_or_default();
        let mut elastic = false;
        let (mut policy, mut quotas) = match base {
            "fifo-backfill" => (Policy::fifo_backfill(), false),
            "sharing" => (Policy::default(), true),
            other => {
                return Err(format!(
                    "{other:?} is not a policy: fifo-backfill or sharing (with :no-preemption, :no-lending, :no-fair-share, :no-quotas, :hard-caps, :elastic)"
                ))
            }
        };
        for modifier in parts {
            match modifier {
                "no-preemption" => policy.preemption = false,
                "no-lending" => policy.lending = false,
                "no-fair-share" => policy.fair_share = false,
                "no-quotas" => quotas = false,
                "elastic" => elastic = true,
                "hard-caps" => {
                    quotas = true;
                    policy.lending = false;
                }
                other => return Err(format!("{text}: {other:?} is not a modifier")),
            }
        }
        policy.reasons = false;
        policy.min_runtime = min_runtime;
        Ok(Self {
            name: text.to_string(),
            policy,
            quotas,
            elastic,
        })
    }
}

/// `TEAM=GUARANTEE[:BORROW[:WEIGHT]]`.
pub fn parse_quota(text: &str) -> Result<(String, TeamShare), String> {
    let (team, rest) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: write TEAM=GUARANTEE[:BORROW[:WEIGHT]]"))?;
    let mut numbers = rest.split(':');
    let number = |s: Option<&str>, what: &str| -> Result<Option<f64>, String> {
        s.map(|s| {
            s.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| format!("{text:?}: {what} must be a number >= 0"))
        })
        .transpose()
    };
    let guarantee = number(numbers.next(), "the guarantee")?.unwrap_or(0.0);
    let borrow = number(numbers.next(), "the borrow limit")?;
    let weight = number(numbers.next(), "the weight")?.unwrap_or(1.0);
    Ok((
        team.to_string(),
        TeamShare {
            guarantee: Some(guarantee as u32),
            borrow_limit: borrow.map(|b| b as u32),
            weight: if weight > 0.0 { weight } else { 1.0 },
        },
    ))
}

/// The quotas given, else the fleet shared equally among the trace's teams,
/// each free to borrow the whole fleet.
pub fn quotas(
    given: &[(String, TeamShare)],
    teams: &BTreeSet<String>,
    fleet_gpus: u32,
) -> HashMap<String, TeamShare> {
    if !given.is_empty() {
        return given.iter().cloned().collect();
    }
    let each = fleet_gpus / teams.len().max(1) as u32;
    teams
        .iter()
        .map(|t| {
            (
                t.clone(),
                TeamShare {
                    guarantee: Some(each),
                    borrow_limit: Some(fleet_gpus),
                    weight: 1.0,
                },
            )
        })
        .collect()
}

/// The shares a run schedules with: the quotas when they are in force,
/// else none (nobody is capped, nobody borrows).
pub fn shares(run: &PolicyRun, quotas: &HashMap<String, TeamShare>) -> Shares {
    if run.quotas {
        Shares::new(quotas.clone(), None, HashMap::new())
    } else {
        Shares::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_and_their_switches() {
        let m = Duration::from_secs(600);
        let f = PolicyRun::parse("fifo-backfill", m).unwrap();
        assert!(!f.policy.preemption && !f.policy.lending && !f.quotas);
        let s = PolicyRun::parse("sharing", m).unwrap();
        assert!(s.policy.preemption && s.policy.lending && s.policy.fair_share && s.quotas);
        let s = PolicyRun::parse("sharing:no-preemption:no-fair-share", m).unwrap();
        assert!(!s.policy.preemption && !s.policy.fair_share && s.policy.lending);
        let h = PolicyRun::parse("fifo-backfill:hard-caps", m).unwrap();
        assert!(h.quotas && !h.policy.lending);
        assert!(!PolicyRun::parse("sharing:no-quotas", m).unwrap().quotas);
        assert!(PolicyRun::parse("sharing:elastic", m).unwrap().elastic);
        assert!(!s.elastic);
        assert!(PolicyRun::parse("lottery", m).is_err());
        assert!(PolicyRun::parse("sharing:fast", m).is_err());
    }

    #[test]
    fn quotas_given_or_shared_equally() {
        let (team, share) = parse_quota("vision=64:128:2").unwrap();
        assert_eq!(team, "vision");
        assert_eq!(
            (share.guarantee, share.borrow_limit, share.weight),
            (Some(64), Some(128), 2.0)
        );
        assert!(parse_quota("vision").is_err() && parse_quota("v=-1").is_err());
        let teams: BTreeSet<String> = ["a", "b", "c", "d"].iter().map(|s| s.to_string()).collect();
        let q = quotas(&[], &teams, 256);
        assert_eq!(q["a"].guarantee, Some(64));
        assert_eq!(q["d"].borrow_limit, Some(256));
    }
}
