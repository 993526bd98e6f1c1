//! The scheduling policy: one pure function of a snapshot and a clock,
//! used three ways (DESIGN.md §11): the coordinator's scheduling passes,
//! the start-time estimates (the same pass run forward on virtual time)
//! and `cohort-sim` (the same pass over a job trace). Nothing here reads
//! the database, talks to an agent or sleeps.
//!
//! - [`order`]: the queue order (priority that ages, then age).
//! - [`placement`]: gang placement over a [`FleetView`].
//! - [`need`]: what a training needs of the fleet.
//! - [`classes`]: named priority classes, some preempting.
//! - [`shares`]: quotas as guarantees that lend; fair share by decayed usage.
//! - [`snapshot`]: what a pass looks at.
//! - [`pass`]: what to place, preempt and say ([`pass::pass`]).
//! - [`preempt`]: which running trainings make room.
//! - [`evolve`]: a snapshot moved by a pass's decisions.
//! - [`forecast`]: start and end estimates.

pub mod classes;
pub mod evolve;
pub mod forecast;
pub mod need;
pub mod order;
pub mod pass;
pub mod placement;
pub mod preempt;
pub mod shares;
pub mod snapshot;

pub use classes::{PriorityClass, PriorityClasses};
pub use forecast::{forecast, Estimate, Forecast, Horizon};
pub use need::Need;
pub use order::QueuePolicy;
pub use pass::{pass, Decisions, NoticeKind, Placement, Policy, Preemption, Resize};
pub use placement::FleetView;
pub use shares::{Admission, Shares, TeamShare};
pub use snapshot::{Job, RunningJob, Snapshot, Stopping, WaitingJob};

#[cfg(test)]
mod tests;
