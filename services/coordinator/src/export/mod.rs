//! Weights out: a checkpoint's files read from wherever its training wrote
//! them ([`source`]), natively or converted for SAELens ([`saelens`]).

pub mod saelens;
pub mod source;
pub mod tree;

/// Why a checkpoint cannot be exported.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// On an agent's local disk that this coordinator cannot read, and the
    /// agent is not connected.
    #[error("checkpoint {0} is on its agent's local disk, which this coordinator cannot read")]
    Unreachable(String),
    /// The storage failed or is misconfigured.
    #[error("{0}")]
    Storage(String),
    /// The files are not a checkpoint we can convert.
    #[error("{0}")]
    Malformed(String),
}
