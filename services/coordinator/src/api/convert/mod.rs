//! Domain <-> `cohort.v1` messages of the public services (`model/` uses no
//! generated type; the agents' messages convert in `api/agent/convert.rs`):
//! trainings, events and progress here, states and GPU requests in files of
//! their own.

mod gpu_request;
mod rank_events;
mod states;

use crate::model::{EventPayload, RankRecord, StoredEvent, Training};
use chrono::{DateTime, Utc};
use cohort_proto::v1;
use cohort_spec::progress::Progress;

pub fn timestamp(t: DateTime<Utc>) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: t.timestamp(),
        nanos: t.timestamp_subsec_nanos() as i32,
    }
}

impl From<&Training> for v1::Training {
    fn from(t: &Training) -> Self {
        v1::Training {
            team: t.team.clone(),
            creator: t.creator.clone(),
            labels: t.labels.clone().into_iter().collect(),
            id: t.id.clone(),
            display_name: t.display_name.clone(),
            config: Some((&t.config).into()),
            gpu_request: Some((&t.gpu_request).into()),
            state: v1::training::State::from(t.state) as i32,
            state_reason: t.state_reason.clone(),
            world_size: t.world_size,
            attempt: t.attempt,
            restart_count: t.restart_count,
            max_restarts: t.max_restarts,
            priority: t.priority,
            // The rank map and latest progress are filled in by the caller
            // when it has them (they live in other tables).
            ranks: Vec::new(),
            latest_progress: None,
            latest_program_progress: None,
            // Filled in by the caller from the scheduler's live view.
            queue_position: 0,
            global_batch_size: 0,
            straggler_ranks: Vec::new(),
            request_id: t.request_id.clone().unwrap_or_default(),
            create_time: Some(timestamp(t.create_time)),
            update_time: Some(timestamp(t.update_time)),
            start_time: t.start_time.map(timestamp),
            end_time: t.end_time.map(timestamp),
            priority_class: t.priority_class.clone(),
            preemption_count: t.preemption_count,
            resize_count: t.resize_count,
            borrowing: t.borrowing
                && matches!(
                    t.state,
                    crate::model::JobState::Scheduled | crate::model::JobState::Running
                ),
            borrow: t.borrow,
            // Filled in by the caller from the stored estimates.
            estimated_start_time: None,
            estimated_end_time: None,
            estimate_reason: String::new(),
            last_event_sequence: t.last_event_seq.max(0) as u64,
            tracking: None,
        }
    }
}

/// The event as WatchTraining sends it; `None` for stored events the API
/// does not expose.
pub fn training_event(e: &StoredEvent) -> Option<v1::TrainingEvent> {
    use v1::training_event::Event;
    let event = match &e.payload {
        EventPayload::StateChange(c) => Event::StateChange(v1::StateChange {
            from: c.from.map_or(v1::training::State::Unspecified, Into::into) as i32,
            to: v1::training::State::from(c.to) as i32,
            reason: c.reason.clone(),
        }),
        EventPayload::Rank(line) => match rank_events::rank_event(line)? {
            Event::Checkpoint(c) => Event::Checkpoint(v1::Checkpoint {
                training_id: e.training_id.clone(),
                attempt: e.attempt,
                create_time: Some(timestamp(e.time)),
                ..c
            }),
            other => other,
        },
        EventPayload::Straggler(c) => Event::Straggler(v1::StragglerReport {
            rank: c.rank,
            step: c.step,
            compute_ms: c.compute_ms,
            median_compute_ms: c.median_compute_ms,
            straggling: c.straggling,
        }),
        EventPayload::Preempted(p) => Event::Preempted(v1::PreemptedEvent {
            by: p.by.clone(),
            kind: p.kind.clone(),
            priority_class: p.priority_class.clone(),
            resume_step: p.resume_step,
            gpu_seconds_lost: p.gpu_seconds_lost,
            checkpointed: p.checkpointed,
        }),
        EventPayload::Estimate(est) => Event::Estimate(v1::EstimateEvent {
            estimated_start_time: est.start_time.map(timestamp),
            estimated_end_time: est.end_time.map(timestamp),
            reason: est.reason.clone(),
        }),
        EventPayload::Resized(r) => Event::Resized(v1::ResizedEvent {
            from_world_size: r.from_world_size,
            to_world_size: r.to_world_size,
            step: r.step,
            seconds: r.seconds,
            reason: r.why.clone(),
        }),
    };
    Some(v1::TrainingEvent {
        sequence: e.seq as u64,
        training_id: e.training_id.clone(),
        attempt: e.attempt,
        time: Some(timestamp(e.time)),
        event: Some(event),
    })
}

/// A progress line as the API shows it, field for field.
fn progress_event(p: Progress) -> v1::ProgressEvent {
    let Progress {
        step,
        total_steps,
        epoch,
        loss,
        mse,
        l1,
        samples_per_sec,
        step_time_ms,
        aux,
        learning_rate,
        grad_norm,
        l0,
        explained_variance,
        dead_fraction,
        samples_digest,
        nonfinite_steps,
        loss_scale,
        data_wait_ms,
    } = p;
    v1::ProgressEvent {
        step,
        total_steps,
        epoch,
        loss,
        mse,
        l1,
        samples_per_sec,
        step_time_ms,
        aux,
        learning_rate,
        grad_norm,
        l0,
        explained_variance,
        dead_fraction,
        samples_digest,
        nonfinite_steps,
        loss_scale,
        data_wait_ms,
    }
}

/// One rank of the rank map, as GetTraining shows it.
pub fn rank_assignment(r: &RankRecord, host_name: &str) -> v1::RankAssignment {
    v1::RankAssignment {
        rank: r.slot.rank,
        local_rank: r.slot.local_rank,
        local_world_size: r.slot.local_world_size,
        agent_id: r.slot.agent_id.clone(),
        host_name: host_name.to_string(),
        gpu_index: r.slot.gpu_index,
        gpu_uuid: r.slot.gpu_uuid.clone(),
        state: v1::RankState::from(r.state) as i32,
        pid: r.pid.and_then(|p| u32::try_from(p).ok()).unwrap_or(0),
        exit_code: r.exit_code,
        signal: r.signal,
    }
}

/// The latest job-level progress as the Training message carries it.
pub fn latest_progress(e: &StoredEvent) -> Option<v1::ProgressEvent> {
    match training_event(e)?.event? {
        v1::training_event::Event::Progress(p) => Some(p),
        _ => None,
    }
}

/// A program's newest progress line, from its stored event.
pub fn latest_program_progress(e: &StoredEvent) -> Option<v1::ProgramProgress> {
    match training_event(e)?.event? {
        v1::training_event::Event::ProgramProgress(p) => Some(p),
        _ => None,
    }
}

/// A registered GPU as the API shows it.
impl From<&crate::model::GpuRecord> for v1::GpuInfo {
    fn from(g: &crate::model::GpuRecord) -> Self {
        v1::GpuInfo {
            index: g.index,
            uuid: g.uuid.clone(),
            name: g.name.clone(),
            memory_total_bytes: g.memory_total_bytes,
            compute_capability: g.compute_capability.clone(),
            simulated: g.simulated,
        }
    }
}

/// A GPU sample as the API shows it.
impl From<&crate::model::GpuSample> for v1::GpuSample {
    fn from(s: &crate::model::GpuSample) -> Self {
        v1::GpuSample {
            gpu_uuid: s.gpu_uuid.clone(),
            index: s.index,
            time: Some(timestamp(s.time)),
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
            throttle_reasons: s.throttle_reasons.clone(),
            simulated: s.simulated,
            processes: s
                .processes
                .iter()
                .map(|p| v1::GpuProcess {
                    pid: p.pid,
                    used_memory_bytes: p.used_memory_bytes,
                    name: p.name.clone(),
                    cohort_rank: p.cohort_rank,
                })
                .collect(),
            xid_errors: s.xid_errors,
            last_xid: s.last_xid,
        }
    }
}
