//! One GPU as selection sees it, and whether it can take a rank.

use super::gib;
use crate::fleet::Hold;
use crate::model::{GpuRecord, GpuSample};
use cohort_proto::error::Reason;

/// Throttle reasons that mean the GPU is being slowed by a fault, not by policy.
const FAULT_THROTTLES: [&str; 4] = [
    "hw_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "sw_thermal_slowdown",
];

/// A connected GPU with what is known about it now.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub uuid: String,
    pub index: i32,
    pub agent_id: String,
    pub agent_name: String,
    pub host_name: String,
    pub memory_total_bytes: u64,
    /// Free device memory per the latest sample; the total when no sample came yet.
    pub memory_free_bytes: u64,
    pub online: bool,
    pub hold: Option<Hold>,
    /// Processes using the GPU that are not cohort ranks: (pid, name).
    pub foreign: Vec<(u32, String)>,
    /// Why the GPU is unhealthy; empty when healthy. A quarantine is one.
    pub faults: Vec<String>,
    /// Why its agent is cordoned (maintenance); `None` when it is not.
    pub cordoned: Option<String>,
}

/// Why a GPU can't take a rank, most serious first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unsuitable {
    Offline,
    /// Its agent is cordoned: no new ranks until it is uncordoned.
    Cordoned(String),
    Unhealthy(Vec<String>),
    HeldBy(Hold),
    UsedBy {
        pid: u32,
        name: String,
    },
    TooLittleMemory {
        need: u64,
        free: u64,
    },
}

impl Unsuitable {
    /// The stable error-model reason (common.proto).
    pub fn reason(&self) -> Reason {
        match self {
            Unsuitable::Offline | Unsuitable::Cordoned(_) | Unsuitable::Unhealthy(_) => {
                Reason::GpuUnhealthy
            }
            Unsuitable::HeldBy(_) | Unsuitable::UsedBy { .. } => Reason::GpuBusy,
            Unsuitable::TooLittleMemory { .. } => Reason::InsufficientMemory,
        }
    }

    pub fn message(&self) -> String {
        match self {
            Unsuitable::Offline => "its agent is offline".into(),
            Unsuitable::Cordoned(why) if why.is_empty() => "its agent is cordoned".into(),
            Unsuitable::Cordoned(why) => format!("its agent is cordoned: {why}"),
            Unsuitable::Unhealthy(faults) => format!("unhealthy: {}", faults.join(", ")),
            Unsuitable::HeldBy(h) if h.training_id.is_empty() => {
                "busy: held by another team's training".into()
            }
            Unsuitable::HeldBy(h) => format!(
                "busy: held by training {} (attempt {}, rank {})",
                h.training_id, h.attempt, h.rank
            ),
            Unsuitable::UsedBy { pid, name } => foreign_note(*pid, name),
            Unsuitable::TooLittleMemory { need, free } => format!(
                "too little memory: needs {} per rank, has {} free",
                gib(*need),
                gib(*free)
            ),
        }
    }
}

/// "used by pid N (name, not a cohort rank)".
pub fn foreign_note(pid: u32, name: &str) -> String {
    if name.is_empty() {
        format!("used by pid {pid} (not a cohort rank)")
    } else {
        format!("used by pid {pid} ({name}, not a cohort rank)")
    }
}

impl Candidate {
    /// From the fleet's view of one GPU.
    pub fn new(
        agent: &crate::fleet::LiveAgent,
        info: &GpuRecord,
        hold: Option<Hold>,
        latest: Option<&GpuSample>,
    ) -> Self {
        Self {
            uuid: info.uuid.clone(),
            index: info.index,
            agent_id: agent.id.clone(),
            agent_name: agent.name.clone(),
            host_name: agent.host_name.clone(),
            memory_total_bytes: info.memory_total_bytes,
            memory_free_bytes: latest.map_or(info.memory_total_bytes, |s| {
                s.memory_total_bytes.saturating_sub(s.memory_used_bytes)
            }),
            online: true,
            hold,
            foreign: latest.map(foreign_processes).unwrap_or_default(),
            faults: info
                .quarantine
                .iter()
                .map(|why| format!("quarantined: {why}"))
                .chain(latest.map(faults).unwrap_or_default())
                .collect(),
            cordoned: agent.cordon.clone(),
        }
    }

    /// Whether the GPU can take a rank needing `need` bytes: what
    /// [`Candidate::unsuitable`] says, without building the reason.
    pub fn fits(&self, need: u64) -> bool {
        self.online
            && self.cordoned.is_none()
            && self.faults.is_empty()
            && self.hold.is_none()
            && self.foreign.is_empty()
            && need <= self.memory_free_bytes
    }

    /// Why the GPU can't take a rank needing `need` bytes (0: any), if it can't.
    pub fn unsuitable(&self, need: u64) -> Option<Unsuitable> {
        if !self.online {
            return Some(Unsuitable::Offline);
        }
        if let Some(why) = &self.cordoned {
            return Some(Unsuitable::Cordoned(why.clone()));
        }
        if !self.faults.is_empty() {
            return Some(Unsuitable::Unhealthy(self.faults.clone()));
        }
        if let Some(hold) = &self.hold {
            return Some(Unsuitable::HeldBy(hold.clone()));
        }
        if let Some((pid, name)) = self.foreign.first() {
            return Some(Unsuitable::UsedBy {
                pid: *pid,
                name: name.clone(),
            });
        }
        if need > self.memory_free_bytes {
            return Some(Unsuitable::TooLittleMemory {
                need,
                free: self.memory_free_bytes,
            });
        }
        None
    }
}

/// Processes on the GPU that are not cohort ranks.
pub fn foreign_processes(sample: &GpuSample) -> Vec<(u32, String)> {
    sample
        .processes
        .iter()
        .filter(|p| !p.cohort_rank)
        .map(|p| (p.pid, p.name.clone()))
        .collect()
}

/// Faults in a sample: uncorrected ECC errors, fault throttling.
pub fn faults(sample: &GpuSample) -> Vec<String> {
    let mut faults = Vec::new();
    if let Some(n) = sample.ecc_errors_uncorrected.filter(|n| *n > 0) {
        faults.push(format!("{n} uncorrected ECC errors"));
    }
    faults.extend(
        sample
            .throttle_reasons
            .iter()
            .filter(|r| FAULT_THROTTLES.contains(&r.as_str()))
            .cloned(),
    );
    faults
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> GpuSample {
        GpuSample {
            memory_total_bytes: 100,
            memory_used_bytes: 30,
            ..Default::default()
        }
    }

    #[test]
    fn faults_are_uncorrected_ecc_and_fault_throttling() {
        let mut s = sample();
        assert!(faults(&s).is_empty());
        s.ecc_errors_uncorrected = Some(0);
        s.ecc_errors_corrected = Some(7);
        s.throttle_reasons = vec!["gpu_idle".into(), "sw_power_cap".into()];
        assert!(faults(&s).is_empty(), "policy throttles are not faults");
        s.ecc_errors_uncorrected = Some(2);
        s.throttle_reasons.push("hw_thermal_slowdown".into());
        assert_eq!(
            faults(&s),
            vec!["2 uncorrected ECC errors", "hw_thermal_slowdown"]
        );
    }

    #[test]
    fn only_processes_that_are_not_ranks_are_foreign() {
        let mut s = sample();
        s.processes = vec![
            crate::model::GpuProcess {
                pid: 10,
                name: "cohort-rank".into(),
                cohort_rank: true,
                ..Default::default()
            },
            crate::model::GpuProcess {
                pid: 11,
                name: "python".into(),
                cohort_rank: false,
                ..Default::default()
            },
        ];
        assert_eq!(foreign_processes(&s), vec![(11, "python".to_string())]);
        assert_eq!(
            Unsuitable::UsedBy {
                pid: 11,
                name: "python".into()
            }
            .message(),
            "used by pid 11 (python, not a cohort rank)"
        );
        assert_eq!(foreign_note(12, ""), "used by pid 12 (not a cohort rank)");
    }
}
