//! Bad input, tried (issue 20, section 5): the coordinator's handling of
//! what an agent sends. Arbitrary bytes, and well-formed messages with
//! extreme values whose encoding is then mutated, are decoded as an
//! `AgentMessage` the way tonic would, and every part the session's handlers
//! read is converted: the Register check, rank events (and their progress
//! lines), GPU samples (times far outside chrono's range included) and file
//! chunks. None may panic.

use super::convert::gpu_sample;
use super::register::validate;
use crate::model::RankReport;
use cohort_proto::v1;
use cohort_proto::v1::agent_message::Message;
use proptest::prelude::*;
use prost::Message as _;

fn handle(bytes: &[u8]) {
    let Ok(message) = v1::AgentMessage::decode(bytes) else {
        return;
    };
    match message.message {
        Some(Message::Register(r)) => {
            let _ = validate(&r);
        }
        Some(Message::RankEvent(e)) => {
            if let Ok(report) = RankReport::try_from(e) {
                if let crate::model::RankReportKind::Progress { json_line } = &report.kind {
                    let _ = cohort_spec::progress::ProgressLine::parse(json_line);
                }
            }
        }
        Some(Message::Telemetry(t)) => {
            for s in t.samples {
                let _ = gpu_sample(s, chrono::Utc::now());
            }
        }
        Some(Message::FileChunk(c)) => {
            let _ = crate::fleet::FileChunk::from(c);
        }
        Some(Message::DoctorResult(r)) => {
            if let Some(report) = r.report {
                let _ = super::doctor::from_proto("fuzz", report);
            }
        }
        Some(Message::Heartbeat(_)) | None => {}
    }
}

fn timestamp() -> impl Strategy<Value = Option<prost_types::Timestamp>> {
    prop::option::of(
        (any::<i64>(), any::<i32>())
            .prop_map(|(seconds, nanos)| prost_types::Timestamp { seconds, nanos }),
    )
}

fn sample() -> impl Strategy<Value = v1::GpuSample> {
    (
        "[ -~]{0,12}",
        any::<i32>(),
        timestamp(),
        prop::option::of(any::<f64>()),
        any::<u64>(),
        any::<u64>(),
        prop::option::of(any::<f64>()),
    )
        .prop_map(
            |(uuid, index, time, util, used, total, temp)| v1::GpuSample {
                gpu_uuid: uuid,
                index,
                time,
                utilization_gpu_percent: util,
                memory_used_bytes: used,
                memory_total_bytes: total,
                temperature_celsius: temp,
                ..Default::default()
            },
        )
}

fn message() -> impl Strategy<Value = v1::AgentMessage> {
    let register = (
        "[ -~]{0,12}",
        prop::collection::vec(("[ -~]{0,8}", any::<i32>(), any::<u64>()), 0..4),
    )
        .prop_map(|(name, gpus)| {
            Message::Register(v1::Register {
                program_roots: Vec::new(),
                team_program_roots: Vec::new(),
                agent_name: name,
                gpus: gpus
                    .into_iter()
                    .map(|(uuid, index, memory)| v1::GpuInfo {
                        uuid,
                        index,
                        memory_total_bytes: memory,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
        });
    let event = (
        "[ -~]{0,8}",
        any::<i32>(),
        any::<i32>(),
        timestamp(),
        any::<u64>(),
        "[ -~]{0,80}",
        any::<i32>(),
    )
        .prop_map(|(id, attempt, rank, time, delivery, line, code)| {
            let kind = if code % 2 == 0 {
                v1::rank_event::Kind::Progress(v1::RankProgress { json_line: line })
            } else {
                v1::rank_event::Kind::Exited(v1::RankExited {
                    status: Some(v1::rank_exited::Status::ExitCode(code)),
                    stderr_tail: line,
                })
            };
            Message::RankEvent(v1::RankEvent {
                training_id: id,
                attempt,
                rank,
                time,
                delivery,
                kind: Some(kind),
            })
        });
    let telemetry = prop::collection::vec(sample(), 0..4)
        .prop_map(|samples| Message::Telemetry(v1::TelemetrySamples { samples }));
    prop_oneof![register, event, telemetry].prop_map(|m| v1::AgentMessage { message: Some(m) })
}

proptest! {
    #[test]
    fn arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        handle(&bytes);
    }

    #[test]
    fn extreme_and_mutated_messages(
        m in message(),
        edits in prop::collection::vec((any::<usize>(), any::<u8>()), 0..6),
    ) {
        let mut bytes = m.encode_to_vec();
        handle(&bytes);
        for (at, value) in edits {
            if !bytes.is_empty() {
                let i = at % bytes.len();
                bytes[i] = value;
            }
        }
        handle(&bytes);
    }
}
