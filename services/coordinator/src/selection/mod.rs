//! GPU selection, as pure functions over a snapshot of the fleet: the memory a
//! rank needs ([`estimate`]), which GPUs can take one and why the others
//! can't ([`candidate`]), the best GPUs for a gang ([`recommend()`]) and the
//! problems of an explicit choice ([`validate()`]). GpuService (api/gpu.rs)
//! builds the snapshot from the live fleet and answers with these.

pub mod candidate;
pub mod estimate;
mod recommend;
mod validate;

pub use candidate::{Candidate, Unsuitable};
pub use estimate::{estimate, EstimateInput, MemoryEstimate, CUDA_CONTEXT_BYTES};
pub use recommend::{choose_in, host_groups, recommend, Recommendation};
pub use validate::{validate, Problem};

/// Every connected GPU as a selection candidate (the live fleet's view).
pub fn candidates(fleet: &crate::fleet::Fleet) -> Vec<Candidate> {
    fleet.map_gpus(|agent, info, hold, latest| Candidate::new(agent, info, hold.cloned(), latest))
}

/// Bytes as GiB with two decimals, for messages.
pub fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}
