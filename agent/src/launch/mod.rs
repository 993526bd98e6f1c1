//! What a StartRanks becomes on this host. The command arrives checked and
//! typed ([`StartRanks`], converted from protobuf once in
//! `connect/convert.rs`); [`start`] makes its directories, checks what its
//! team may reach, plans the launch (`plan.rs`: the built-in SAE or a
//! team's program, both the same [`crate::supervisor::RankSpec`]s) and
//! starts each rank through the supervisor.

mod command;
mod plan;
mod start;

pub use command::{NoticeRanks, RankAssignment, Refusal, StartFailure, StartRanks, StopRanks};
pub use start::{start, Host};
