//! The problems of an explicit GPU choice: each GPU named in rank order is
//! checked like [`super::recommend()`] checks candidates, plus unknown ids and
//! duplicates.

use super::candidate::Candidate;
use cohort_proto::error::Reason;
use std::collections::HashMap;

/// One problem with one chosen GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The id as given.
    pub gpu_id: String,
    /// A stable reason of the error model.
    pub reason: Reason,
    pub message: String,
}

/// Every problem of `chosen` (GPU uuids in rank order) against `fleet`, each
/// GPU needing `need` bytes free (0: any). Empty: the choice can run now.
pub fn validate(fleet: &[Candidate], chosen: &[String], need: u64) -> Vec<Problem> {
    let by_id: HashMap<&str, &Candidate> = fleet.iter().map(|c| (c.uuid.as_str(), c)).collect();
    let mut first_rank: HashMap<&str, usize> = HashMap::new();
    let mut problems = Vec::new();
    for (rank, id) in chosen.iter().enumerate() {
        let problem = |reason, message| Problem {
            gpu_id: id.clone(),
            reason,
            message,
        };
        if let Some(first) = first_rank.get(id.as_str()) {
            problems.push(problem(
                Reason::InvalidArgument,
                format!("listed twice: for rank {first} and rank {rank}"),
            ));
            continue;
        }
        first_rank.insert(id, rank);
        let Some(gpu) = by_id.get(id.as_str()) else {
            problems.push(problem(
                Reason::GpuNotFound,
                "no connected agent has this GPU".into(),
            ));
            continue;
        };
        if let Some(why) = gpu.unsuitable(need) {
            problems.push(problem(
                why.reason(),
                format!("{} GPU {}: {}", gpu.agent_name, gpu.index, why.message()),
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::Hold;

    const GIB: u64 = 1 << 30;

    fn gpu(uuid: &str, free_gib: u64) -> Candidate {
        Candidate {
            uuid: uuid.into(),
            index: 0,
            agent_id: "agt-a".into(),
            agent_name: "a".into(),
            host_name: "a.local".into(),
            memory_total_bytes: 80 * GIB,
            memory_free_bytes: free_gib * GIB,
            online: true,
            hold: None,
            foreign: Vec::new(),
            faults: Vec::new(),
            cordoned: None,
        }
    }

    fn ids(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_good_choice_has_no_problems() {
        let fleet = vec![gpu("G0", 10), gpu("G1", 10)];
        assert!(validate(&fleet, &ids(&["G1", "G0"]), 5 * GIB).is_empty());
    }

    #[test]
    fn each_problem_is_named() {
        let mut busy = gpu("BUSY", 10);
        busy.hold = Some(Hold {
            training_id: "trn-9".into(),
            attempt: 2,
            rank: 1,
            team: String::new(),
        });
        let mut sick = gpu("SICK", 10);
        sick.faults = vec!["3 uncorrected ECC errors".into()];
        let fleet = vec![gpu("G0", 10), gpu("SMALL", 1), busy, sick];
        let problems = validate(
            &fleet,
            &ids(&["G0", "NOPE", "BUSY", "SMALL", "SICK", "G0"]),
            2 * GIB,
        );
        let got: Vec<(&str, &str, &str)> = problems
            .iter()
            .map(|p| (p.gpu_id.as_str(), p.reason.as_str(), p.message.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("NOPE", "GPU_NOT_FOUND", "no connected agent has this GPU"),
                (
                    "BUSY",
                    "GPU_BUSY",
                    "a GPU 0: busy: held by training trn-9 (attempt 2, rank 1)"
                ),
                (
                    "SMALL",
                    "INSUFFICIENT_MEMORY",
                    "a GPU 0: too little memory: needs 2.00 GiB per rank, has 1.00 GiB free"
                ),
                (
                    "SICK",
                    "GPU_UNHEALTHY",
                    "a GPU 0: unhealthy: 3 uncorrected ECC errors"
                ),
                (
                    "G0",
                    "INVALID_ARGUMENT",
                    "listed twice: for rank 0 and rank 5"
                ),
            ]
        );
    }

    #[test]
    fn without_a_need_memory_is_not_checked() {
        let fleet = vec![gpu("G0", 0)];
        assert!(validate(&fleet, &ids(&["G0"]), 0).is_empty());
    }
}
