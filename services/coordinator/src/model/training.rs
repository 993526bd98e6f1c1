//! A training job as the coordinator knows it, its state history and its
//! stored events.

use super::{GpuRequest, JobState};
use chrono::{DateTime, Utc};
use cohort_spec::progress::ProgressLine;
use cohort_spec::Workload;
use serde::{Deserialize, Serialize};

/// The reason of a training re-forming at another size (its notice's, then
/// QUEUED's until it is placed again).
pub const RESIZING: &str = "RESIZING: ";

/// A training job (one row of `trainings`, decoded).
#[derive(Debug, Clone, PartialEq)]
pub struct Training {
    pub id: String,
    /// The client's idempotency key, if it gave one.
    pub request_id: Option<String>,
    pub display_name: String,
    /// What it runs: the built-in SAE or a program.
    pub config: Workload,
    pub gpu_request: GpuRequest,
    pub state: JobState,
    /// Why the training is in its state (pending reason, failure cause, ...).
    pub state_reason: String,
    /// Number of ranks; 0 until placed.
    pub world_size: i32,
    /// True when the ranks span more than one process (world_size > 1).
    pub distributed: bool,
    pub priority: i32,
    /// The current attempt; 0 until first placed.
    pub attempt: i32,
    pub restart_count: i32,
    pub max_restarts: i32,
    /// Rendezvous of the current attempt, once placed.
    pub master_addr: Option<String>,
    pub master_port: Option<i32>,
    /// The sequence number of the newest stored event.
    pub last_event_seq: i64,
    pub create_time: DateTime<Utc>,
    pub update_time: DateTime<Utc>,
    pub start_time: Option<DateTime<Utc>>,
    pub end_time: Option<DateTime<Utc>>,
    /// The W3C traceparent of the call that created it, when traced: the
    /// lifecycle spans join that trace.
    pub trace_context: Option<String>,
    /// The team it belongs to ("" under `--auth none`).
    pub team: String,
    /// Who created it (a token's name, or "anonymous").
    pub creator: String,
    /// Its labels (e.g. `sweep=lr-k`), set at create.
    pub labels: std::collections::BTreeMap<String, String>,
    /// Its priority class ("" for a training created before classes, or
    /// with a bare numeric priority and no class).
    pub priority_class: String,
    /// It may run beyond its team's guarantee on idle GPUs (and then be
    /// reclaimed); false: only ever within the guarantee.
    pub borrow: bool,
    /// It runs beyond its team's guarantee now.
    pub borrowing: bool,
    /// Times it was preempted (or reclaimed) and put back in the queue.
    pub preemption_count: i32,
    /// When the current attempt was placed.
    pub attempt_time: Option<DateTime<Utc>>,
    /// It wrote a checkpoint in the grace of an earlier notice (a program
    /// that honours the notice): preempting it loses little.
    pub notice_saves: bool,
    /// Times its gang was re-formed at another size (an elastic training).
    pub resize_count: i32,
}

impl Training {
    /// The built-in SAE's config as its current world size runs it: the
    /// micro-batch and accumulation that hold its global batch (an elastic
    /// training, `optim.global_batch`); None for a program, before it is
    /// placed, or at a size that cannot split it.
    pub fn sae_at_world_size(&self) -> Option<cohort_spec::TrainingConfig> {
        let sae = self.config.sae()?;
        let world = i64::from(self.world_size);
        if world <= 0 {
            return None;
        }
        let largest = match &self.gpu_request.selection {
            super::GpuSelection::Range { max, .. } => i64::from(*max),
            _ => world,
        };
        sae.at_world_size(world, largest)
    }
}

/// One row of a training's state history.
#[derive(Debug, Clone, PartialEq)]
pub struct StateTransition {
    pub training_id: String,
    pub attempt: i32,
    /// `None` for the creation of the training.
    pub from: Option<JobState>,
    pub to: JobState,
    pub reason: String,
    pub at: DateTime<Utc>,
}

/// A state change as stored in the event history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateChange {
    pub from: Option<JobState>,
    pub to: JobState,
    pub reason: String,
}

/// What a stored training event carries.
#[derive(Debug, Clone, PartialEq)]
pub enum EventPayload {
    /// The training changed state (written with the transition, atomically).
    StateChange(StateChange),
    /// A progress line of a rank, as cohort-spec defines it.
    Rank(ProgressLine),
    /// A rank became, or stopped being, a straggler.
    Straggler(StragglerChange),
    /// The training was preempted (or reclaimed, or moved off a drained
    /// agent) after a notice, and waits to be placed again.
    Preempted(Preempted),
    /// Its start or end estimate appeared, moved by more than 10 %, or went.
    Estimate(EstimateChange),
    /// An elastic training's gang re-formed at another size.
    Resized(Resized),
}

/// A resize, as stored in the event history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resized {
    pub from_world_size: i32,
    pub to_world_size: i32,
    /// The step it resumed from.
    pub step: Option<i64>,
    /// From the decision to the new gang sent to its agents.
    pub seconds: f64,
    /// Why: "grow" or "shrink".
    pub why: String,
}

/// A preemption, as stored in the event history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Preempted {
    /// The training it made room for (a drained agent's name for a drain).
    pub by: String,
    /// "preempt", "reclaim" or "drain".
    pub kind: String,
    /// The class of `by` ("" when none, or for a reclaim or drain).
    #[serde(default)]
    pub priority_class: String,
    /// The step it resumes from: its newest checkpoint's (none: from the start).
    pub resume_step: Option<i64>,
    /// GPU-seconds trained since that checkpoint, lost.
    pub gpu_seconds_lost: f64,
    /// A checkpoint was written during the notice's grace.
    pub checkpointed: bool,
}

/// A start or end estimate, as stored in the event history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EstimateChange {
    pub start_time: Option<DateTime<Utc>>,
    pub end_time: Option<DateTime<Utc>>,
    /// Why an estimate is absent ("NO_DURATION: ..."); empty when both are known.
    pub reason: String,
}

/// A change of a rank's straggler status, as stored in the event history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StragglerChange {
    pub rank: i32,
    pub step: i64,
    pub compute_ms: f64,
    pub median_compute_ms: f64,
    pub straggling: bool,
}

impl EventPayload {
    /// The stored `kind`: "state_change", or the progress line's `event` tag
    /// ("started", "progress", "rank_stats", "checkpoint", "finished", ...).
    pub fn kind(&self) -> String {
        match self {
            EventPayload::StateChange(_) => "state_change".to_string(),
            EventPayload::Straggler(_) => "straggler".to_string(),
            EventPayload::Preempted(_) => "preempted".to_string(),
            EventPayload::Estimate(_) => "estimate".to_string(),
            EventPayload::Resized(_) => "resized".to_string(),
            EventPayload::Rank(line) => line.event().to_string(),
        }
    }

    /// The stored `payload_json`.
    pub fn to_json(&self) -> String {
        match self {
            EventPayload::StateChange(change) => {
                serde_json::to_string(change).expect("state change serialises")
            }
            EventPayload::Rank(line) => line.to_line(),
            EventPayload::Straggler(change) => {
                serde_json::to_string(change).expect("straggler change serialises")
            }
            EventPayload::Preempted(p) => serde_json::to_string(p).expect("preemption serialises"),
            EventPayload::Estimate(e) => serde_json::to_string(e).expect("estimate serialises"),
            EventPayload::Resized(r) => serde_json::to_string(r).expect("resize serialises"),
        }
    }

    /// Decodes a stored event; `None` when the row is not one we wrote.
    pub fn from_stored(kind: &str, payload_json: &str) -> Option<Self> {
        if kind == "state_change" {
            serde_json::from_str(payload_json)
                .ok()
                .map(EventPayload::StateChange)
        } else if kind == "straggler" {
            serde_json::from_str(payload_json)
                .ok()
                .map(EventPayload::Straggler)
        } else if kind == "preempted" {
            serde_json::from_str(payload_json)
                .ok()
                .map(EventPayload::Preempted)
        } else if kind == "resized" {
            serde_json::from_str(payload_json)
                .ok()
                .map(EventPayload::Resized)
        } else if kind == "estimate" {
            serde_json::from_str(payload_json)
                .ok()
                .map(EventPayload::Estimate)
        } else {
            ProgressLine::parse(payload_json)
                .filter(|line| line.event() == kind)
                .map(EventPayload::Rank)
        }
    }
}

/// One stored event of a training's history.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub training_id: String,
    /// From 1, increasing by one per event of the training.
    pub seq: i64,
    pub attempt: i32,
    pub payload: EventPayload,
    pub time: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::SubsecRound;

    #[test]
    fn payloads_round_trip() {
        let payloads = [
            EventPayload::StateChange(StateChange {
                from: None,
                to: JobState::Queued,
                reason: "created".into(),
            }),
            EventPayload::Rank(ProgressLine::Checkpoint {
                step: 10,
                path: "/run/ckpt-10".into(),
                best: true,
            }),
            EventPayload::Preempted(Preempted {
                by: "trn-urgent".into(),
                kind: "preempt".into(),
                priority_class: "urgent".into(),
                resume_step: Some(120),
                gpu_seconds_lost: 0.5,
                checkpointed: true,
            }),
            EventPayload::Estimate(EstimateChange {
                start_time: Some(Utc::now().trunc_subsecs(0)),
                end_time: None,
                reason: "NO_DURATION: x".into(),
            }),
        ];
        for payload in payloads {
            let back = EventPayload::from_stored(&payload.kind(), &payload.to_json());
            assert_eq!(back, Some(payload));
        }
        assert_eq!(EventPayload::from_stored("progress", "{}"), None);
    }
}
