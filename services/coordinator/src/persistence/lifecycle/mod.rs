//! A training's life as the database writes it, step by step, each in
//! one transaction: its create (and the group commit that batches
//! creates, with each team's queue count between batches, `creates.rs`,
//! `queue_counts.rs`, `queued_rows.rs`), its placements (`placements.rs`)
//! and its restarts (`restarts.rs`). The state changes themselves and the
//! reads of a training are `trainings.rs`.

pub(super) mod creates;
pub mod placements;
mod queue_counts;
mod queued_rows;
mod restarts;
