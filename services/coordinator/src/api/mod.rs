//! The gRPC services of `cohort.v1`, one module each, sharing a [`Context`].
//!
//! - [`training`]: TrainingService (create/get/list/cancel over persistence;
//!   placement and live streams are the scheduler's and the hub's job).
//! - [`gpu`], [`telemetry`], [`agent`]: GpuService, TelemetryService,
//!   AgentService (not implemented yet: every RPC answers UNIMPLEMENTED).
//! - [`convert`]: domain -> proto messages; [`page_token`]: opaque page tokens;
//!   [`status`]: persistence errors -> `tonic::Status` with ErrorInfo reasons.

pub mod agent;
pub mod convert;
pub mod gpu;
pub mod page_token;
pub mod status;
pub mod telemetry;
pub mod training;

use crate::fleet::Fleet;
use crate::jobs::{JobSettings, Jobs};
use crate::persistence::Persistence;

/// What every service shares. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Context {
    pub db: Persistence,
    /// The live agents, GPU holds and telemetry fan-out.
    pub fleet: Fleet,
    /// The scheduler and job runner.
    pub jobs: Jobs,
}

impl Context {
    pub fn new(db: Persistence) -> Self {
        Self::with_settings(db, JobSettings::default())
    }

    pub fn with_settings(db: Persistence, settings: JobSettings) -> Self {
        let fleet = Fleet::new();
        let jobs = Jobs::new(db.clone(), fleet.clone(), settings);
        Self { db, fleet, jobs }
    }
}
