//! One module per command group; each function runs the RPCs of one command
//! and prints the result in the chosen format.

pub mod agents;
pub mod gpus;
pub mod telemetry;
pub mod train;
pub mod watch;
