//! The agent's messages into domain types, once, on receive.

use crate::model::{RankReport, RankReportKind, RunningRank};
use cohort_proto::v1;

/// A RankEvent without a kind says nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rank event without a kind")]
pub struct EmptyRankEvent;

impl TryFrom<v1::RankEvent> for RankReport {
    type Error = EmptyRankEvent;

    fn try_from(event: v1::RankEvent) -> Result<Self, EmptyRankEvent> {
        use v1::rank_event::Kind;
        use v1::rank_exited::Status;
        let kind = match event.kind.ok_or(EmptyRankEvent)? {
            Kind::Started(s) => RankReportKind::Started { pid: s.pid },
            Kind::Progress(p) => RankReportKind::Progress {
                json_line: p.json_line,
            },
            Kind::Exited(e) => {
                let (code, signal) = match e.status {
                    Some(Status::ExitCode(c)) => (Some(c), None),
                    Some(Status::Signal(s)) => (None, Some(s)),
                    None => (None, None),
                };
                RankReportKind::Exited {
                    code,
                    signal,
                    stderr_tail: e.stderr_tail,
                }
            }
            Kind::StartFailed(f) => RankReportKind::StartFailed { message: f.message },
        };
        Ok(RankReport {
            training_id: event.training_id,
            attempt: event.attempt,
            rank: event.rank,
            kind,
        })
    }
}

impl From<&v1::RunningRank> for RunningRank {
    fn from(r: &v1::RunningRank) -> Self {
        RunningRank {
            training_id: r.training_id.clone(),
            attempt: r.attempt,
            rank: r.rank,
        }
    }
}
