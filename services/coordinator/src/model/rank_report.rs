//! What an agent reports about its ranks, as the job runner reads it: the
//! agent session converts the protobuf messages into these once, on receive.

/// One event of one rank of one attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct RankReport {
    pub training_id: String,
    pub attempt: i32,
    pub rank: i32,
    pub kind: RankReportKind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum RankReportKind {
    /// The process started.
    Started { pid: u32 },
    /// The process printed a progress line (JSON, as printed).
    Progress { json_line: String },
    /// The process ended: an exit code or a signal (neither when unknown),
    /// with the tail of its stderr.
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
        stderr_tail: String,
    },
    /// The process could not be started.
    StartFailed { reason: String, message: String },
}

/// A rank an agent says it is running (in its Register).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningRank {
    pub training_id: String,
    pub attempt: i32,
    pub rank: i32,
}
