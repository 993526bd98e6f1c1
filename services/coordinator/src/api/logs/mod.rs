//! WatchLogs: the log lines of a training's ranks, read from the agents
//! that ran them through their Connect streams (the relay that also reads
//! checkpoint files): each rank's last lines first, then, when following,
//! new lines as they come (polled every [`FOLLOW_EVERY`]) until the
//! attempt ends or the client goes. A rank whose agent is not connected
//! answers with the lines kept at its exit, or AGENT_NOT_CONNECTED.

mod reader;

use super::caller::visible_training;
use super::error::ApiError;
use super::StatusStream;
use crate::context::Context;
use crate::model::{Principal, RankRecord};
use cohort_proto::v1;
use reader::Reader;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

/// Lines of each rank sent first when the request asks for none.
pub const DEFAULT_TAIL: usize = 100;
/// The most lines of each rank a request may ask for first.
pub const MAX_TAIL: usize = 10_000;
/// How often a follower looks for new lines.
pub const FOLLOW_EVERY: Duration = Duration::from_millis(500);
/// How often a follower checks whether the attempt ended.
const STATE_EVERY: Duration = Duration::from_secs(2);
/// The most bytes read back from a log's end for its last lines.
const TAIL_WINDOW: u64 = 1 << 20;
/// Bytes per read (the agents' cap).
const CHUNK: u32 = 1 << 20;

type Sender = mpsc::Sender<Result<v1::LogLine, Status>>;

/// Where one rank's lines come from.
enum Source {
    /// Its agent is connected: its log, read from `offset`.
    Live {
        agent_id: String,
        offset: u64,
        /// An unfinished last line, kept until its end arrives.
        partial: Vec<u8>,
    },
    /// Its agent is gone: the lines kept when it exited.
    Kept(String),
}

struct RankLogs {
    rank: i32,
    source: Source,
}

pub async fn watch_logs(
    ctx: &Context,
    who: &Principal,
    req: v1::WatchLogsRequest,
) -> Result<StatusStream<v1::LogLine>, Status> {
    let training = visible_training(ctx, who, "training_id", &req.training_id).await?;
    let tail = match req.tail {
        0 => DEFAULT_TAIL,
        n if n < 0 => return Err(ApiError::field("tail", "must be >= 0").into()),
        n => (n as usize).min(MAX_TAIL),
    };
    let attempt = match req.attempt {
        None => training.attempt,
        Some(a) if a >= 1 && a <= training.attempt => a,
        Some(a) => {
            let why = match training.attempt {
                0 => "the training has not been placed yet".to_string(),
                n => format!("the training's attempts are 1 to {n}, not {a}"),
            };
            return Err(ApiError::field("attempt", why).into());
        }
    };
    let mut ranks = ctx
        .db
        .ranks(&training.id, attempt)
        .await
        .map_err(ApiError::from)?;
    if let Some(missing) = req
        .ranks
        .iter()
        .find(|r| !ranks.iter().any(|k| k.slot.rank == **r))
    {
        return Err(ApiError::field(
            "ranks",
            format!(
                "attempt {attempt} has no rank {missing} ({} ranks)",
                ranks.len()
            ),
        )
        .into());
    }
    if !req.ranks.is_empty() {
        ranks.retain(|k| req.ranks.contains(&k.slot.rank));
    }
    let sources = sources(ctx, &training.id, attempt, ranks).await?;
    let (tx, rx) = mpsc::channel(64);
    let ctx2 = ctx.clone();
    let caller = {
        let (kind, actor, _) = who.actor();
        format!("{kind}:{actor}")
    };
    let id = training.id.clone();
    // Following the current attempt goes on with the next one (a restart,
    // or the first placement of a training still queued).
    let next_attempts = req.follow && req.attempt.is_none();
    let ranks_wanted = req.ranks.clone();
    tokio::spawn(async move {
        let mut reader = Reader {
            fleet: ctx2.fleet.clone(),
            caller,
            training_id: id,
            attempt,
            tx,
        };
        // Ends when the lines are sent (or, following, when the attempt or
        // the training ends) or the client goes (Stopped): nothing to
        // report either way.
        let _ = reader
            .run(
                &ctx2,
                sources,
                tail,
                req.follow,
                next_attempts.then_some(ranks_wanted),
            )
            .await;
    });
    Ok(ctx.until_stopping(ReceiverStream::new(rx)))
}

/// Where each rank's lines come from; AGENT_NOT_CONNECTED for a rank
/// whose agent is gone and that kept nothing.
async fn sources(
    ctx: &Context,
    training_id: &str,
    attempt: i32,
    ranks: Vec<RankRecord>,
) -> Result<Vec<RankLogs>, Status> {
    let kept = ctx
        .db
        .rank_log_tails(training_id, attempt)
        .await
        .map_err(ApiError::from)?;
    let mut out = Vec::with_capacity(ranks.len());
    for rank in ranks {
        let agent_id = rank.slot.agent_id;
        let source = if ctx.fleet.is_connected(&agent_id) {
            Source::Live {
                agent_id,
                offset: 0,
                partial: Vec::new(),
            }
        } else {
            let tail = kept
                .iter()
                .find(|(r, _)| *r == rank.slot.rank)
                .and_then(|(_, t)| t.clone());
            match tail {
                Some(tail) => Source::Kept(tail),
                None => {
                    let name = ctx.db.agent_name(&agent_id).await.map_err(ApiError::from)?;
                    let agent = name.unwrap_or(agent_id);
                    return Err(ApiError::AgentNotConnected {
                        agent,
                        rank: rank.slot.rank,
                    }
                    .into());
                }
            }
        };
        out.push(RankLogs {
            rank: rank.slot.rank,
            source,
        });
    }
    Ok(out)
}
