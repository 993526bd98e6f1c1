//! What the benchmark programs share: starting a coordinator to load, the
//! latency histogram, and reading what the coordinator stored.

pub mod coordinator;
pub mod histogram;
pub mod store;
