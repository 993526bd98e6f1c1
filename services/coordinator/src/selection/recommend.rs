//! The best GPUs for a gang: healthy, free, with enough free memory, on as few
//! hosts as possible. A host that can hold the whole gang is preferred (the
//! one with the most suitable GPUs); otherwise hosts are taken in order of
//! most suitable GPUs, which uses the fewest hosts. Ties go to free memory;
//! within a host the GPUs with the most free memory come first.

use super::candidate::{Candidate, Unsuitable};
use std::collections::{BTreeMap, HashMap};

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

/// Candidates' positions grouped by agent, in the order agents first appear.
pub fn host_groups(candidates: &[Candidate]) -> Vec<Vec<usize>> {
    let mut at: HashMap<&str, usize> = HashMap::new();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, c) in candidates.iter().enumerate() {
        let g = *at.entry(c.agent_id.as_str()).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[g].push(i);
    }
    groups
}

/// The GPUs that fit a rank of `need` bytes, host by host, best host first:
/// most suitable GPUs, then most free memory, then by name; within a host
/// the most free memory first; only as many hosts as hold `want` GPUs (0:
/// all). `hosts` is [`host_groups`] of `candidates`.
fn ranked_hosts<'a>(
    candidates: &'a [Candidate],
    hosts: &[Vec<usize>],
    need: u64,
    want: usize,
) -> Vec<Vec<&'a Candidate>> {
    // Each host's count and free memory first, without collecting its GPUs:
    // only the hosts that are taken get sorted lists.
    let mut ranked: Vec<(usize, u64, &Vec<usize>)> = hosts
        .iter()
        .filter_map(|group| {
            let (n, free) = group
                .iter()
                .map(|&i| &candidates[i])
                .filter(|c| c.fits(need))
                .fold((0, 0u64), |(n, free), c| {
                    (n + 1, free + c.memory_free_bytes)
                });
            (n > 0).then_some((n, free, group))
        })
        .collect();
    ranked.sort_by(|(n_a, free_a, a), (n_b, free_b, b)| {
        let (a, b) = (&candidates[a[0]], &candidates[b[0]]);
        n_b.cmp(n_a)
            .then(free_b.cmp(free_a))
            .then(a.agent_name.cmp(&b.agent_name))
            .then(a.agent_id.cmp(&b.agent_id))
    });
    let mut taken = 0;
    ranked
        .into_iter()
        .take_while(|(n, _, _)| {
            let more = want == 0 || taken < want;
            taken += n;
            more
        })
        .map(|(_, _, group)| {
            let mut gpus: Vec<&Candidate> = group
                .iter()
                .map(|&i| &candidates[i])
                .filter(|c| c.fits(need))
                .collect();
            gpus.sort_by(|a, b| {
                b.memory_free_bytes
                    .cmp(&a.memory_free_bytes)
                    .then(a.index.cmp(&b.index))
            });
            gpus
        })
        .collect()
}

/// `count` GPUs (0: every suitable one) that each have `need` bytes free,
/// in rank order; fewer when fewer fit. `single_host` keeps them on one agent.
fn choose(candidates: &[Candidate], need: u64, count: usize, single_host: bool) -> Vec<&Candidate> {
    choose_in(
        candidates,
        &host_groups(candidates),
        need,
        count,
        single_host,
    )
}

/// [`choose`] with the candidates' [`host_groups`] at hand (a scheduling
/// pass groups 8,000 GPUs once, not per plan).
pub fn choose_in<'a>(
    candidates: &'a [Candidate],
    hosts: &[Vec<usize>],
    need: u64,
    count: usize,
    single_host: bool,
) -> Vec<&'a Candidate> {
    // One host is enough to look at when the gang must fit on one.
    let hosts = ranked_hosts(candidates, hosts, need, if single_host { 1 } else { count });
    let want = if count == 0 {
        hosts.iter().map(Vec::len).sum()
    } else {
        count
    };
    let mut chosen: Vec<&Candidate> = Vec::with_capacity(want);
    if single_host {
        if let Some(best) = hosts.first() {
            chosen.extend(best.iter().take(want));
        }
    } else {
        for gpus in &hosts {
            let room = want - chosen.len();
            if room == 0 {
                break;
            }
            chosen.extend(gpus.iter().take(room));
        }
    }
    chosen
}

/// Chooses `count` GPUs (0: every suitable one) that each have `need` bytes
/// free; `single_host` keeps them on one agent. Says why of every other GPU.
pub fn recommend(
    candidates: &[Candidate],
    need: u64,
    count: usize,
    single_host: bool,
) -> Recommendation {
    let rejected: Vec<(Candidate, Unsuitable)> = candidates
        .iter()
        .filter_map(|c| c.unsuitable(need).map(|why| (c.clone(), why)))
        .collect();
    let suitable = candidates.len() - rejected.len();
    let want = if count == 0 { suitable } else { count };
    let chosen: Vec<Candidate> = choose(candidates, need, count, single_host)
        .into_iter()
        .cloned()
        .collect();

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
            Unsuitable::Cordoned(_) => "cordoned",
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
            cordoned: None,
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
            .map(|(c, w)| (c.uuid.clone(), w.reason().as_str(), w.message()))
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
