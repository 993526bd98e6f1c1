//! What the benchmark programs share: starting a coordinator to load,
//! simulated agents, the latency histogram, and reading what the
//! coordinator stored.

pub mod agents;
pub mod burst;
pub mod coordinator;
pub mod histogram;
pub mod store;
pub mod window;
