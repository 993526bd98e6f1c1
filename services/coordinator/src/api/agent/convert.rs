//! The agent's messages into domain types, once, on receive; the
//! coordinator's commands into messages, once, on send.

use crate::fleet::{AgentCommand, FileChunk, FileRef, StartRanks};
use crate::model::{GpuProcess, GpuSample, RankReport, RankReportKind, RunningRank};
use chrono::{DateTime, Utc};
use cohort_proto::v1;
use cohort_proto::v1::coordinator_message::Message;

/// A RankEvent without a kind says nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rank event without a kind")]
pub struct EmptyRankEvent;

impl TryFrom<v1::RankEvent> for RankReport {
    type Error = EmptyRankEvent;

    fn try_from(event: v1::RankEvent) -> Result<Self, EmptyRankEvent> {
        use v1::rank_event::Kind;
        use v1::rank_exited::Status;
        let kind = match event.kind.ok_or(EmptyRankEvent)? {
            Kind::Started(s) => RankReportKind::Started { pid: s.pid },
            Kind::Progress(p) => RankReportKind::Progress {
                json_line: p.json_line,
            },
            Kind::Exited(e) => {
                let (code, signal) = match e.status {
                    Some(Status::ExitCode(c)) => (Some(c), None),
                    Some(Status::Signal(s)) => (None, Some(s)),
                    None => (None, None),
                };
                RankReportKind::Exited {
                    code,
                    signal,
                    stderr_tail: e.stderr_tail,
                }
            }
            Kind::StartFailed(f) => RankReportKind::StartFailed {
                reason: f.reason,
                message: f.message,
            },
        };
        Ok(RankReport {
            training_id: event.training_id,
            attempt: event.attempt,
            rank: event.rank,
            kind,
        })
    }
}

/// An agent's GPU sample; one without a (valid) time takes `received`.
pub fn gpu_sample(s: v1::GpuSample, received: DateTime<Utc>) -> GpuSample {
    let time = s
        .time
        .and_then(|t| DateTime::from_timestamp(t.seconds, t.nanos.clamp(0, 999_999_999) as u32))
        .unwrap_or(received);
    GpuSample {
        gpu_uuid: s.gpu_uuid,
        index: s.index,
        time,
        utilization_gpu_percent: s.utilization_gpu_percent,
        utilization_memory_percent: s.utilization_memory_percent,
        memory_used_bytes: s.memory_used_bytes,
        memory_total_bytes: s.memory_total_bytes,
        temperature_celsius: s.temperature_celsius,
        power_draw_watts: s.power_draw_watts,
        power_limit_watts: s.power_limit_watts,
        sm_clock_mhz: s.sm_clock_mhz,
        memory_clock_mhz: s.memory_clock_mhz,
        ecc_errors_corrected: s.ecc_errors_corrected,
        ecc_errors_uncorrected: s.ecc_errors_uncorrected,
        throttle_reasons: s.throttle_reasons,
        simulated: s.simulated,
        processes: s
            .processes
            .into_iter()
            .map(|p| GpuProcess {
                pid: p.pid,
                used_memory_bytes: p.used_memory_bytes,
                name: p.name,
                cohort_rank: p.cohort_rank,
            })
            .collect(),
        xid_errors: s.xid_errors,
        last_xid: s.last_xid,
    }
}

impl From<&v1::RunningRank> for RunningRank {
    fn from(r: &v1::RunningRank) -> Self {
        RunningRank {
            training_id: r.training_id.clone(),
            attempt: r.attempt,
            rank: r.rank,
        }
    }
}

impl From<AgentCommand> for v1::CoordinatorMessage {
    fn from(command: AgentCommand) -> Self {
        let message = match command {
            AgentCommand::StartRanks(s) => Message::StartRanks(v1::StartRanks::from(*s)),
            AgentCommand::StopRanks {
                training_id,
                attempt,
                grace,
                reason,
            } => Message::StopRanks(v1::StopRanks {
                training_id,
                attempt,
                grace_period: prost_types::Duration::try_from(grace).ok(),
                reason,
            }),
            AgentCommand::NoticeRanks {
                training_id,
                attempt,
                grace,
                reason,
            } => Message::NoticeRanks(v1::NoticeRanks {
                training_id,
                attempt,
                grace_period: prost_types::Duration::try_from(grace).ok(),
                reason,
            }),
            AgentCommand::Ack { through } => Message::Ack(v1::Ack { through }),
            AgentCommand::ReadFile {
                request_id,
                file,
                offset,
                length,
            } => {
                let list = matches!(file, FileRef::Listing(_));
                let (path, log) = match file {
                    FileRef::Path(path) | FileRef::Listing(path) => (path, None),
                    FileRef::RankLog {
                        training_id,
                        attempt,
                        rank,
                        previous,
                    } => (
                        String::new(),
                        Some(v1::RankLog {
                            training_id,
                            attempt,
                            rank,
                            previous,
                        }),
                    ),
                };
                Message::ReadFile(v1::ReadFile {
                    request_id,
                    path,
                    offset,
                    length,
                    log,
                    list,
                })
            }
            AgentCommand::Members(coordinators) => Message::Members(v1::Members { coordinators }),
            AgentCommand::RunDoctor { request_id } => {
                Message::RunDoctor(v1::RunDoctorCommand { request_id })
            }
        };
        v1::CoordinatorMessage {
            message: Some(message),
            leader_epoch: 0,
        }
    }
}

impl From<v1::FileChunk> for FileChunk {
    fn from(c: v1::FileChunk) -> Self {
        FileChunk {
            request_id: c.request_id,
            data: c.data,
            file_size: c.file_size,
            error: c.error,
        }
    }
}

impl From<StartRanks> for v1::StartRanks {
    fn from(s: StartRanks) -> Self {
        v1::StartRanks {
            training_id: s.training_id,
            attempt: s.attempt,
            config: Some(v1::TrainingConfig::from(&s.config)),
            world_size: s.world_size,
            master_addr: s.master_addr,
            master_port: u32::from(s.master_port),
            ranks: s
                .ranks
                .into_iter()
                .map(|r| v1::LocalRankAssignment {
                    rank: r.rank,
                    local_rank: r.local_rank,
                    local_world_size: r.local_world_size,
                    gpu_index: r.gpu_index,
                    gpu_uuid: r.gpu_uuid,
                })
                .collect(),
            // the agent's default: <work-dir>/trainings/<id>/run, shared by attempts
            run_dir: String::new(),
            trace_context: s.trace_context,
            published_checkpoints: s
                .published_checkpoints
                .into_iter()
                .map(|(attempt, step)| v1::PublishedCheckpoint { attempt, step })
                .collect(),
            team: s.team,
            group_rank: s.group_rank,
            group_world_size: s.group_world_size,
            max_restarts: s.max_restarts,
            host_memory_limit_bytes: s.host_memory_limit_bytes,
            min_world_size: s.world_sizes.0,
            max_world_size: s.world_sizes.1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::LocalRank;
    use std::time::Duration;

    #[test]
    fn commands_become_the_messages_agents_read() {
        let start = AgentCommand::StartRanks(Box::new(StartRanks {
            training_id: "t".into(),
            attempt: 2,
            config: cohort_spec::Workload::from_toml(
                "[model]\nd_in = 4\n[optim]\nbatch_size = 8\nsteps = 1\n[data.synthetic]\nnum_samples = 4\n",
            )
            .unwrap(),
            world_size: 2,
            master_addr: "10.0.0.1".into(),
            master_port: 29500,
            ranks: vec![LocalRank {
                rank: 1,
                local_rank: 0,
                local_world_size: 1,
                gpu_index: 3,
                gpu_uuid: "GPU-3".into(),
            }],
            trace_context: [("traceparent".to_string(), "00-x".to_string())].into(),
            published_checkpoints: vec![(1, 40), (1, 20)],
            team: "vision".into(),
            group_rank: 1,
            group_world_size: 2,
            max_restarts: 3,
            host_memory_limit_bytes: 5 << 30,
            world_sizes: (2, 4),
        }));
        let Some(Message::StartRanks(m)) = v1::CoordinatorMessage::from(start).message else {
            panic!("not StartRanks");
        };
        assert_eq!((m.attempt, m.world_size, m.master_port), (2, 2, 29500));
        assert_eq!((m.min_world_size, m.max_world_size), (2, 4));
        assert_eq!(
            (m.group_rank, m.group_world_size, m.max_restarts),
            (1, 2, 3)
        );
        assert_eq!(m.host_memory_limit_bytes, 5 << 30);
        assert_eq!((m.ranks[0].rank, m.ranks[0].gpu_index), (1, 3));
        assert!(m.run_dir.is_empty(), "the agent's default run dir");
        assert_eq!(m.trace_context["traceparent"], "00-x");
        let published: Vec<(i32, i64)> = m
            .published_checkpoints
            .iter()
            .map(|c| (c.attempt, c.step))
            .collect();
        assert_eq!(published, vec![(1, 40), (1, 20)]);
        assert_eq!(m.team, "vision");
        let sent = cohort_spec::Workload::try_from(m.config.unwrap()).unwrap();
        assert_eq!(sent.sae().unwrap().model.d_in, 4, "the config, typed");
        let stop = AgentCommand::StopRanks {
            training_id: "t".into(),
            attempt: 2,
            grace: Duration::from_millis(1500),
            reason: "cancelled".into(),
        };
        let Some(Message::StopRanks(m)) = v1::CoordinatorMessage::from(stop).message else {
            panic!("not StopRanks");
        };
        let grace = m.grace_period.unwrap();
        assert_eq!((grace.seconds, grace.nanos), (1, 500_000_000));
    }

    #[test]
    fn a_rank_event_without_a_kind_says_nothing() {
        let event = v1::RankEvent {
            training_id: "t".into(),
            ..Default::default()
        };
        assert_eq!(RankReport::try_from(event), Err(EmptyRankEvent));
        let exited = v1::RankEvent {
            training_id: "t".into(),
            attempt: 1,
            rank: 0,
            time: None,
            delivery: 0,
            kind: Some(v1::rank_event::Kind::Exited(v1::RankExited {
                status: Some(v1::rank_exited::Status::Signal(9)),
                stderr_tail: "x".into(),
            })),
        };
        let report = RankReport::try_from(exited).unwrap();
        assert_eq!(
            report.kind,
            RankReportKind::Exited {
                code: None,
                signal: Some(9),
                stderr_tail: "x".into()
            }
        );
    }

    #[test]
    fn a_gpu_sample_keeps_every_field_and_takes_the_receive_time_when_it_has_none() {
        let received = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let sent = v1::GpuSample {
            gpu_uuid: "GPU-1".into(),
            index: 3,
            time: Some(prost_types::Timestamp {
                seconds: 1_700_000_000,
                nanos: 123_456_789,
            }),
            utilization_gpu_percent: Some(50.0),
            memory_used_bytes: 10,
            memory_total_bytes: u64::MAX,
            ecc_errors_uncorrected: Some(2),
            throttle_reasons: vec!["hw_slowdown".into()],
            simulated: true,
            processes: vec![v1::GpuProcess {
                pid: 7,
                used_memory_bytes: Some(5),
                name: "python".into(),
                cohort_rank: false,
            }],
            xid_errors: Some(1),
            last_xid: Some(79),
            ..Default::default()
        };
        let sample = gpu_sample(sent.clone(), received);
        assert_eq!(sample.time.timestamp_millis(), 1_700_000_000_123);
        assert_eq!(
            v1::GpuSample::from(&sample),
            sent,
            "a round trip changes nothing"
        );
        let untimed = gpu_sample(v1::GpuSample { time: None, ..sent }, received);
        assert_eq!(untimed.time, received);
    }
}
