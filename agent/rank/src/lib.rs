//! `cohort-rank`: one data-parallel rank of a cohort training job. It trains
//! the built-in sparse autoencoder with tch and synchronises with its peers
//! through PyTorch's own c10d collectives (gloo on CPU, NCCL on GPU).

pub mod checkpoint;
pub mod data;
pub mod dist;
pub mod doctor;
pub mod error;
pub mod launch;
pub mod model;
pub mod preempt;
pub mod report;
pub mod state;
pub mod timing;
pub mod train;

pub use error::RankError;
