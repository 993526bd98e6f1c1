//! The coordinator's domain types, independent of the database rows and of the
//! generated protobuf messages (each side converts to and from these).

mod alert;
mod auth;
mod doctor;
mod gpu;
mod gpu_request;
mod labels;
mod placement;
mod rank_report;
mod state;
mod sweep;
mod training;

pub use alert::{Alert, AlertKey, AlertKind, RunningTraining, Severity, Transition};
pub use auth::{valid_team, AuditEntry, Principal, Role};
pub use doctor::{DoctorCheck, DoctorReport, DoctorStatus};
pub use gpu::{GpuProcess, GpuRecord, GpuSample};
pub use gpu_request::{GpuRequest, GpuSelection, InvalidGpuRequest};
pub use labels::{label_key_ok, label_value_ok};
pub use placement::{AgentRecord, Placement, RankRecord, RankSlot};
pub use rank_report::{RankReport, RankReportKind, RunningRank};
pub use state::{JobState, RankState, UnknownState};
pub use sweep::{
    Direction, Objective, RungRecord, Searcher, Sweep, SweepState, Trial, TrialTemplate,
    BUDGET_SPENT, FRONTIER, SAE_METRICS,
};
pub use training::{
    EstimateChange, EventPayload, Preempted, Resized, StateChange, StateTransition, StoredEvent,
    StragglerChange, Training, RESIZING,
};
