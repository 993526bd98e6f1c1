//! The best GPUs for a gang: healthy, free, with enough free memory, on as few
//! hosts as possible. A host that can hold the whole gang is preferred (the
//! one with the most suitable GPUs); otherwise hosts are taken in order of
//! most suitable GPUs, which uses the fewest hosts. Ties go to free memory;
//! within a host the GPUs with the most free memory come first.

use super::candidate::{Candidate, Unsuitable};
use std::collections::BTreeMap;

/// What [`recommend`] chose and why it chose nothing else.
#[derive(Debug, Clone, PartialEq)]
pub struct Recommendation {
    /// The chosen GPUs in rank order (host by host).
    pub chosen: Vec<Candidate>,
    /// Every GPU that can't take a rank, with the reason.
    pub rejected: Vec<(Candidate, Unsuitable)>,
    /// Why fewer than `count` were chosen; `None` when all were.
    pub shortfall: Option<String>,
}

/// Chooses `count` GPUs (0: every suitable one) that each have `need` bytes
/// free; `single_host` keeps them on one agent.
pub fn recommend(
    candidates: &[Candidate],
    need: u64,
    count: usize,
    single_host: bool,
) -> Recommendation {
    let mut rejected = Vec::new();
    let mut hosts: BTreeMap<&str, Vec<&Candidate>> = BTreeMap::new();
    for c in candidates {
        match c.unsuitable(need) {
            Some(why) => rejected.push((c.clone(), why)),
            None => hosts.entry(c.agent_id.as_str()).or_default().push(c),
        }
    }
    let mut hosts: Vec<Vec<&Candidate>> = hosts.into_values().collect();
    for gpus in &mut hosts {
        gpus.sort_by(|a, b| {
            b.memory_free_bytes
                .cmp(&a.memory_free_bytes)
                .then(a.index.cmp(&b.index))
        });
    }
    let free_memory =
        |gpus: &[&Candidate]| -> u64 { gpus.iter().map(|g| g.memory_free_bytes).sum::<u64>() };
    // Most suitable GPUs first, then the most free memory, then by name.
    hosts.sort_by(|a, b| {
        b.len()
            .cmp(&a.len())
            .then(free_memory(b).cmp(&free_memory(a)))
            .then(a[0].agent_name.cmp(&b[0].agent_name))
    });
    let suitable: usize = hosts.iter().map(Vec::len).sum();
    let want = if count == 0 { suitable } else { count };

    let mut chosen: Vec<Candidate> = Vec::new();
    if single_host {
        if let Some(best) = hosts.first() {
            chosen.extend(best.iter().take(want).map(|c| (*c).clone()));
        }
    } else {
        for gpus in &hosts {
            let room = want - chosen.len();
            if room == 0 {
                break;
            }
            chosen.extend(gpus.iter().take(room).map(|c| (*c).clone()));
        }
    }

    let shortfall = (chosen.len() < want).then(|| {
        let mut why = format!(
            "asked for {want} GPUs, {} {} suitable",
            suitable,
            if suitable == 1 { "is" } else { "are" }
        );
        if single_host && suitable > chosen.len() {
            why.push_str(&format!(
                " but no single host has {want} (at most {})",
                chosen.len()
            ));
        }
        let counts = count_reasons(&rejected);
        if !counts.is_empty() {
            why.push_str(&format!("; not suitable: {counts}"));
        }
        why
    });
    Recommendation {
        chosen,
        rejected,
        shortfall,
    }
}

/// "2 busy, 1 too little memory".
fn count_reasons(rejected: &[(Candidate, Unsuitable)]) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, why) in rejected {
        let label = match why {
            Unsuitable::Offline => "offline",
            Unsuitable::Unhealthy(_) => "unhealthy",
            Unsuitable::HeldBy(_) | Unsuitable::UsedBy { .. } => "busy",
            Unsuitable::TooLittleMemory { .. } => "too little memory",
        };
        *counts.entry(label).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|(label, n)| format!("{n} {label}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::Hold;

    const GIB: u64 = 1 << 30;

    fn gpu(agent: &str, index: i32, free_gib: u64) -> Candidate {
        Candidate {
            uuid: format!("GPU-{agent}-{index}"),
            index,
            agent_id: format!("agt-{agent}"),
            agent_name: agent.into(),
            host_name: format!("{agent}.local"),
            memory_total_bytes: 80 * GIB,
            memory_free_bytes: free_gib * GIB,
            online: true,
            hold: None,
            foreign: Vec::new(),
            faults: Vec::new(),
        }
    }

    fn ids(r: &Recommendation) -> Vec<&str> {
        r.chosen.iter().map(|c| c.uuid.as_str()).collect()
    }

    fn held(mut c: Candidate) -> Candidate {
        c.hold = Some(Hold {
            training_id: "trn-1".into(),
            attempt: 1,
            rank: 0,
            team: String::new(),
        });
        c
    }

    #[test]
    fn one_host_that_fits_beats_spreading() {
        // a: 2 free, b: 3 free, c: 1 free. Three GPUs fit on b alone.
        let fleet = vec![
            gpu("a", 0, 70),
            gpu("a", 1, 70),
            gpu("b", 0, 40),
            gpu("b", 1, 50),
            gpu("b", 2, 45),
            gpu("c", 0, 79),
        ];
        let r = recommend(&fleet, GIB, 3, false);
        assert_eq!(ids(&r), vec!["GPU-b-1", "GPU-b-2", "GPU-b-0"]);
        assert_eq!(r.shortfall, None);
        assert!(r.rejected.is_empty());
    }

    #[test]
    fn a_gang_bigger_than_any_host_uses_the_fewest_hosts() {
        // 3 hosts x 2 free GPUs, one of c's busy: 4 GPUs take 2 hosts, not 3,
        // and the two hosts with the most free memory.
        let fleet = vec![
            gpu("a", 0, 10),
            gpu("a", 1, 10),
            gpu("b", 0, 20),
            gpu("b", 1, 20),
            gpu("c", 0, 30),
            held(gpu("c", 1, 30)),
        ];
        let r = recommend(&fleet, GIB, 4, false);
        assert_eq!(ids(&r), vec!["GPU-b-0", "GPU-b-1", "GPU-a-0", "GPU-a-1"]);
        let hosts: std::collections::HashSet<_> =
            r.chosen.iter().map(|c| c.agent_id.clone()).collect();
        assert_eq!(hosts.len(), 2);
        assert_eq!(r.rejected.len(), 1);
        assert_eq!(r.rejected[0].0.uuid, "GPU-c-1");
    }

    #[test]
    fn ties_go_to_free_memory() {
        let fleet = vec![gpu("a", 0, 10), gpu("b", 0, 60), gpu("c", 0, 30)];
        let r = recommend(&fleet, GIB, 2, false);
        assert_eq!(ids(&r), vec!["GPU-b-0", "GPU-c-0"]);
    }

    #[test]
    fn every_rejection_is_explained() {
        let mut offline = gpu("a", 0, 70);
        offline.online = false;
        let mut hot = gpu("a", 1, 70);
        hot.faults = vec!["hw_thermal_slowdown".into()];
        let mut foreign = gpu("b", 0, 70);
        foreign.foreign = vec![(4242, "python".into())];
        let small = gpu("b", 1, 2);
        let fleet = vec![
            offline,
            hot,
            foreign,
            small,
            held(gpu("c", 0, 70)),
            gpu("c", 1, 70),
        ];
        let r = recommend(&fleet, 3 * GIB, 2, false);
        assert_eq!(ids(&r), vec!["GPU-c-1"]);
        let why: Vec<(String, &str, String)> = r
            .rejected
            .iter()
            .map(|(c, w)| (c.uuid.clone(), w.reason(), w.message()))
            .collect();
        assert_eq!(
            why,
            vec![
                (
                    "GPU-a-0".into(),
                    "GPU_UNHEALTHY",
                    "its agent is offline".into()
                ),
                (
                    "GPU-a-1".into(),
                    "GPU_UNHEALTHY",
                    "unhealthy: hw_thermal_slowdown".into()
                ),
                (
                    "GPU-b-0".into(),
                    "GPU_BUSY",
                    "used by pid 4242 (python, not a cohort rank)".into()
                ),
                (
                    "GPU-b-1".into(),
                    "INSUFFICIENT_MEMORY",
                    "too little memory: needs 3.00 GiB per rank, has 2.00 GiB free".into()
                ),
                (
                    "GPU-c-0".into(),
                    "GPU_BUSY",
                    "busy: held by training trn-1 (attempt 1, rank 0)".into()
                ),
            ]
        );
        assert_eq!(
            r.shortfall.as_deref(),
            Some(
                "asked for 2 GPUs, 1 is suitable; not suitable: 2 busy, 1 offline, \
                 1 too little memory, 1 unhealthy"
            )
        );
    }

    #[test]
    fn single_host_never_spreads() {
        let fleet = vec![
            gpu("a", 0, 10),
            gpu("a", 1, 10),
            gpu("b", 0, 20),
            gpu("b", 1, 20),
        ];
        let r = recommend(&fleet, GIB, 3, true);
        assert_eq!(ids(&r), vec!["GPU-b-0", "GPU-b-1"]);
        assert_eq!(
            r.shortfall.as_deref(),
            Some("asked for 3 GPUs, 4 are suitable but no single host has 3 (at most 2)")
        );
    }

    #[test]
    fn count_zero_takes_every_suitable_gpu_packed_by_host() {
        let fleet = vec![
            gpu("a", 0, 10),
            gpu("b", 0, 20),
            gpu("b", 1, 5),
            gpu("c", 0, 1),
        ];
        let r = recommend(&fleet, 2 * GIB, 0, false);
        assert_eq!(ids(&r), vec!["GPU-b-0", "GPU-b-1", "GPU-a-0"]);
        assert_eq!(r.shortfall, None);
        assert_eq!(r.rejected.len(), 1);
    }

    #[test]
    fn an_empty_fleet_says_so() {
        let r = recommend(&[], GIB, 2, false);
        assert!(r.chosen.is_empty());
        assert_eq!(
            r.shortfall.as_deref(),
            Some("asked for 2 GPUs, 0 are suitable")
        );
    }
}
