//! What the supervisor reports about each rank.

use cohort_spec::progress::ProgressLine;
use cohort_spec::ExitClass;

use super::RankKey;

/// How many of a rank's last stderr lines an exit report carries.
pub const STDERR_TAIL_LINES: usize = 50;

/// One thing that happened to one rank.
#[derive(Debug, Clone, PartialEq)]
pub struct RankEvent {
    pub key: RankKey,
    /// The GPU the rank was started on.
    pub gpu_index: u32,
    pub kind: RankEventKind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum RankEventKind {
    /// The process is running; `pid` is also its process group id.
    Started { pid: u32 },
    /// A progress line the rank printed on stdout.
    Progress(ProgressLine),
    /// The process ended and was reaped; the last event for this rank.
    Exited(RankExit),
}

/// How a rank process ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RankExit {
    /// The exit code, if it exited normally.
    pub code: Option<i32>,
    /// The signal that killed it, if one did.
    pub signal: Option<i32>,
    /// The code classified by the rank exit-code table; `Stopped` when the
    /// agent was asked to stop it and it did not exit 0 on its own.
    pub class: ExitClass,
    /// The last stderr lines, oldest first (at most [`STDERR_TAIL_LINES`]).
    pub stderr_tail: Vec<String>,
    /// True when the agent had sent the stop signal.
    pub stop_requested: bool,
    /// True when the rank had a preemption notice (its class is then
    /// `Preempted` unless it exited 0).
    pub noticed: bool,
}
