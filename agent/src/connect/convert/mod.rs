//! The agent's protobuf edge: agent domain types -> `cohort.v1` messages
//! here, the coordinator's commands -> domain types in [`commands`] (once,
//! checked, on receive).

mod commands;

pub use commands::{notice_ranks, start_ranks, stop_ranks, Rejected};

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cohort_proto::v1;

use crate::launch::Refusal;

use crate::probe::{GpuInfo, GpuProcess, GpuSample};
use crate::supervisor::{RankEvent, RankEventKind, RankExit, RankKey};

/// RankExited.stderr_tail carries at most this many bytes (the newest ones).
pub const STDERR_TAIL_MAX_BYTES: usize = 4096;

pub fn gpu_info(g: &GpuInfo) -> v1::GpuInfo {
    v1::GpuInfo {
        index: g.index as i32,
        uuid: g.uuid.clone(),
        name: g.name.clone(),
        memory_total_bytes: g.memory_total_bytes,
        compute_capability: g
            .compute_capability
            .map(|c| format!("{}.{}", c.major, c.minor))
            .unwrap_or_default(),
        simulated: g.simulated,
    }
}

pub fn gpu_sample(s: &GpuSample) -> v1::GpuSample {
    v1::GpuSample {
        gpu_uuid: s.uuid.clone(),
        index: s.index as i32,
        time: Some(timestamp(
            UNIX_EPOCH + Duration::from_millis(s.timestamp_ms),
        )),
        utilization_gpu_percent: s.utilization_gpu_pct.map(f64::from),
        utilization_memory_percent: s.utilization_memory_pct.map(f64::from),
        memory_used_bytes: s.memory_used_bytes,
        memory_total_bytes: s.memory_total_bytes,
        temperature_celsius: s.temperature_c.map(f64::from),
        power_draw_watts: s.power_draw_w,
        power_limit_watts: s.power_limit_w,
        sm_clock_mhz: s.sm_clock_mhz,
        memory_clock_mhz: s.memory_clock_mhz,
        ecc_errors_corrected: s.ecc_corrected,
        ecc_errors_uncorrected: s.ecc_uncorrected,
        xid_errors: s.xid_errors,
        last_xid: s.last_xid,
        throttle_reasons: s.throttle_reasons.clone().unwrap_or_default(),
        simulated: s.simulated,
        processes: s.processes.iter().map(gpu_process).collect(),
    }
}

pub fn gpu_process(p: &GpuProcess) -> v1::GpuProcess {
    v1::GpuProcess {
        pid: p.pid,
        used_memory_bytes: p.used_memory_bytes,
        name: process_name(p.pid).unwrap_or_default(),
        cohort_rank: p.cohort_rank,
    }
}

/// The name of a process on this host, where /proc tells it (blocking: the
/// session converts samples on a blocking thread).
#[allow(clippy::disallowed_methods)]
fn process_name(pid: u32) -> Option<String> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(comm.trim_end().to_string())
}

pub fn timestamp(t: SystemTime) -> prost_types::Timestamp {
    prost_types::Timestamp::from(t)
}

/// A supervisor event as the coordinator sees it, stamped now.
pub fn rank_event(event: &RankEvent) -> v1::RankEvent {
    let kind = match &event.kind {
        RankEventKind::Started { pid } => {
            v1::rank_event::Kind::Started(v1::RankStarted { pid: *pid })
        }
        RankEventKind::Progress(line) => v1::rank_event::Kind::Progress(v1::RankProgress {
            json_line: line.to_line(),
        }),
        RankEventKind::Exited(exit) => v1::rank_event::Kind::Exited(rank_exited(exit)),
    };
    rank_event_of(&event.key, kind)
}

/// A rank that did not start: with the stable reason when the training is
/// at fault (no restart helps), without when the host is.
pub fn start_failed(key: &RankKey, refusal: &Refusal) -> v1::RankEvent {
    rank_event_of(
        key,
        v1::rank_event::Kind::StartFailed(v1::RankStartFailed {
            message: refusal.message.clone(),
            reason: refusal
                .reason
                .map(|r| r.as_str().to_string())
                .unwrap_or_default(),
        }),
    )
}

fn rank_event_of(key: &RankKey, kind: v1::rank_event::Kind) -> v1::RankEvent {
    v1::RankEvent {
        training_id: key.job_id.clone(),
        attempt: key.attempt as i32,
        rank: key.rank as i32,
        time: Some(timestamp(SystemTime::now())),
        // Numbered by the outbox when it is queued or sent.
        delivery: 0,
        kind: Some(kind),
    }
}

fn rank_exited(exit: &RankExit) -> v1::RankExited {
    let status = match (exit.code, exit.signal) {
        (Some(code), _) => Some(v1::rank_exited::Status::ExitCode(code)),
        (None, Some(signal)) => Some(v1::rank_exited::Status::Signal(signal)),
        (None, None) => None,
    };
    v1::RankExited {
        status,
        stderr_tail: tail_bytes(&exit.stderr_tail.join("\n"), STDERR_TAIL_MAX_BYTES),
    }
}

/// The last at most `max` bytes of `text`, cut at a character boundary.
fn tail_bytes(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].to_string()
}

/// The time a `google.protobuf.Duration` stands for; `None` when unset, zero
/// or negative.
pub fn positive_duration(d: Option<&prost_types::Duration>) -> Option<Duration> {
    let d = Duration::try_from(*d?).ok()?;
    (!d.is_zero()).then_some(d)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use cohort_spec::ExitClass;

    #[test]
    fn stderr_tail_keeps_the_newest_bytes() {
        assert_eq!(tail_bytes("abc", 10), "abc");
        assert_eq!(tail_bytes("abcdef", 3), "def");
        // 'é' is two bytes: never cut inside it.
        assert_eq!(tail_bytes("aé", 1), "");
        assert_eq!(tail_bytes("aéb", 3), "éb");
    }

    #[test]
    fn exits_carry_code_or_signal() {
        let mut exit = RankExit {
            code: Some(3),
            signal: None,
            class: ExitClass::UserError,
            stderr_tail: vec!["a".into(), "b".into()],
            stop_requested: false,
            noticed: false,
        };
        let p = rank_exited(&exit);
        assert_eq!(p.status, Some(v1::rank_exited::Status::ExitCode(3)));
        assert_eq!(p.stderr_tail, "a\nb");
        exit.code = None;
        exit.signal = Some(9);
        assert_eq!(
            rank_exited(&exit).status,
            Some(v1::rank_exited::Status::Signal(9))
        );
    }

    #[test]
    fn processes_carry_their_name_and_whether_they_are_ranks() {
        let me = GpuProcess {
            pid: std::process::id(),
            used_memory_bytes: Some(1 << 20),
            cohort_rank: false,
        };
        let p = gpu_process(&me);
        assert_eq!(p.pid, std::process::id());
        assert_eq!(p.used_memory_bytes, Some(1 << 20));
        assert!(!p.cohort_rank);
        // The test binary's own name, as /proc has it (truncated to 15 bytes).
        let comm = std::fs::read_to_string("/proc/self/comm").unwrap();
        assert_eq!(p.name, comm.trim_end());
        assert!(!p.name.is_empty());
        let gone = GpuProcess {
            pid: u32::MAX,
            used_memory_bytes: None,
            cohort_rank: true,
        };
        assert_eq!(gpu_process(&gone).name, "");
        assert!(gpu_process(&gone).cohort_rank);
    }

    #[test]
    fn durations() {
        let d = prost_types::Duration {
            seconds: 2,
            nanos: 500_000_000,
        };
        assert_eq!(
            positive_duration(Some(&d)),
            Some(Duration::from_millis(2500))
        );
        assert_eq!(
            positive_duration(Some(&prost_types::Duration::default())),
            None
        );
        assert_eq!(positive_duration(None), None);
    }
}
