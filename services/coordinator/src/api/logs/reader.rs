//! Reading ranks' logs from their agents: the last lines first, then, when
//! following, what was written since, a read per rank every
//! [`FOLLOW_EVERY`](super::FOLLOW_EVERY).

use super::{RankLogs, Sender, Source, CHUNK, FOLLOW_EVERY, STATE_EVERY, TAIL_WINDOW};
use crate::context::Context;
use crate::fleet::{FileRef, Fleet};
use cohort_proto::v1;

/// The client went away (or the server stops): nothing more to send.
pub(super) struct Stopped;

pub(super) struct Reader {
    pub fleet: Fleet,
    pub caller: String,
    pub training_id: String,
    pub attempt: i32,
    pub tx: Sender,
}

/// What a follower learns of the training now and then.
enum Progress {
    /// The attempt followed goes on.
    Same,
    /// Another attempt began (`Some`), or the training ended (`None`).
    Over(Option<i32>),
}

impl Reader {
    /// With `next_attempts` (the ranks asked for), following goes on with
    /// each new attempt; else it ends with the one followed.
    pub async fn run(
        &mut self,
        ctx: &Context,
        mut ranks: Vec<RankLogs>,
        tail: usize,
        follow: bool,
        next_attempts: Option<Vec<i32>>,
    ) -> Result<(), Stopped> {
        for logs in &mut ranks {
            self.first_lines(logs, tail).await?;
        }
        if !follow {
            return Ok(());
        }
        let mut checked = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(FOLLOW_EVERY).await;
            let progress = if checked.elapsed() >= STATE_EVERY {
                checked = tokio::time::Instant::now();
                self.progress(ctx).await
            } else {
                Progress::Same
            };
            for logs in &mut ranks {
                self.new_lines(logs).await?;
            }
            match (progress, &next_attempts) {
                (Progress::Same, _) => {}
                (Progress::Over(Some(next)), Some(wanted)) => {
                    self.attempt = next;
                    ranks = self.ranks_of(ctx, wanted).await;
                    if !ranks.is_empty() {
                        let note = format!("[cohort] attempt {next} began");
                        self.send(ranks[0].rank, note, true).await?;
                    }
                }
                (Progress::Over(_), _) => return Ok(()),
            }
            if self.tx.is_closed() {
                return Err(Stopped);
            }
        }
    }

    /// Whether the attempt followed goes on.
    async fn progress(&self, ctx: &Context) -> Progress {
        match ctx.db.get_training(&self.training_id).await {
            Ok(Some(t)) if t.state.is_final() => Progress::Over(None),
            Ok(Some(t)) if t.attempt != self.attempt => Progress::Over(Some(t.attempt)),
            Ok(Some(_)) | Err(_) => Progress::Same,
            Ok(None) => Progress::Over(None),
        }
    }

    /// The ranks of the attempt now followed (those `wanted`; all when
    /// empty), read from their start.
    async fn ranks_of(&self, ctx: &Context, wanted: &[i32]) -> Vec<RankLogs> {
        let ranks = ctx
            .db
            .ranks(&self.training_id, self.attempt)
            .await
            .unwrap_or_default();
        ranks
            .into_iter()
            .filter(|r| wanted.is_empty() || wanted.contains(&r.slot.rank))
            .map(|r| RankLogs {
                rank: r.slot.rank,
                source: Source::Live {
                    agent_id: r.slot.agent_id,
                    offset: 0,
                    partial: Vec::new(),
                },
            })
            .collect()
    }

    fn file(&self, rank: i32) -> FileRef {
        FileRef::RankLog {
            training_id: self.training_id.clone(),
            attempt: self.attempt,
            rank,
            previous: false,
        }
    }

    async fn send(&self, rank: i32, line: String, note: bool) -> Result<(), Stopped> {
        let line = v1::LogLine {
            rank,
            attempt: self.attempt,
            line,
            note,
        };
        self.tx.send(Ok(line)).await.map_err(|_| Stopped)
    }

    /// A read of a rank's log; `None` when it failed (the agent went away,
    /// or does not answer).
    async fn read(
        &self,
        agent_id: &str,
        rank: i32,
        offset: u64,
        length: u32,
    ) -> Option<(Vec<u8>, u64)> {
        match self
            .fleet
            .read_file(agent_id, &self.caller, self.file(rank), offset, length)
            .await
        {
            Ok(got) => Some(got),
            Err(e) => {
                tracing::debug!(training_id = %self.training_id, rank, error = %e, "a log read failed");
                None
            }
        }
    }

    /// The last `tail` lines of a rank; following goes on from their end.
    async fn first_lines(&self, logs: &mut RankLogs, tail: usize) -> Result<(), Stopped> {
        let rank = logs.rank;
        let agent_id = match &logs.source {
            Source::Kept(text) => {
                let note = "[cohort] its agent is not connected: the last lines it printed to stderr before it exited";
                self.send(rank, note.to_string(), true).await?;
                let lines: Vec<&str> = text.lines().collect();
                for line in &lines[lines.len().saturating_sub(tail)..] {
                    self.send(rank, line.to_string(), false).await?;
                }
                return Ok(());
            }
            Source::Live { agent_id, .. } => agent_id.clone(),
        };
        let Some((_, size)) = self.read(&agent_id, rank, 0, 0).await else {
            if self.fleet.is_connected(&agent_id) {
                let note = "[cohort] this rank has written no log yet (not started, or it could not start)";
                return self.send(rank, note.to_string(), true).await;
            }
            return self.gone(logs).await;
        };
        let start = size.saturating_sub(TAIL_WINDOW);
        let mut bytes = Vec::new();
        let mut at = start;
        while at < size {
            let Some((data, _)) = self.read(&agent_id, rank, at, CHUNK).await else {
                return self.unread(logs, &agent_id).await;
            };
            if data.is_empty() {
                break;
            }
            at += data.len() as u64;
            bytes.extend_from_slice(&data);
        }
        let (lines, rest) = split_lines(&bytes);
        let rest = rest.len() as u64;
        // A window that begins mid-line: its first piece is not a line.
        let skip = usize::from(start > 0);
        let lines: Vec<String> = lines.into_iter().skip(skip).collect();
        for line in &lines[lines.len().saturating_sub(tail)..] {
            self.send(rank, line.clone(), false).await?;
        }
        if let Source::Live { offset, .. } = &mut logs.source {
            *offset = at - rest;
        }
        Ok(())
    }

    /// Lines written since the last read.
    async fn new_lines(&self, logs: &mut RankLogs) -> Result<(), Stopped> {
        let rank = logs.rank;
        let Source::Live {
            agent_id,
            offset,
            partial,
        } = &mut logs.source
        else {
            return Ok(());
        };
        let agent_id = agent_id.clone();
        let mut at = *offset;
        let mut pending = std::mem::take(partial);
        let read = self.read_on(&agent_id, rank, &mut at, &mut pending).await;
        if let Source::Live {
            offset, partial, ..
        } = &mut logs.source
        {
            *offset = at;
            *partial = pending;
        }
        match read? {
            true => Ok(()),
            false => self.unread(logs, &agent_id).await,
        }
    }

    /// Sends the lines between `at` and the log's end, keeping an unfinished
    /// last one in `pending`; false when the agent did not answer. Each read
    /// answers the file's size too, so a poll with nothing new is one read.
    async fn read_on(
        &self,
        agent_id: &str,
        rank: i32,
        at: &mut u64,
        pending: &mut Vec<u8>,
    ) -> Result<bool, Stopped> {
        loop {
            let Some((data, size)) = self.read(agent_id, rank, *at, CHUNK).await else {
                return Ok(false);
            };
            if size < *at {
                // Rotated at its size cap: the new generation from its start.
                *at = 0;
                pending.clear();
                continue;
            }
            if data.is_empty() {
                break;
            }
            *at += data.len() as u64;
            pending.extend_from_slice(&data);
            let (lines, rest) = split_lines(pending);
            let rest = rest.to_vec();
            for line in lines {
                self.send(rank, line, false).await?;
            }
            *pending = rest;
            if pending.len() > CHUNK as usize {
                // A line longer than a read: sent in pieces.
                let piece = String::from_utf8_lossy(pending).into_owned();
                pending.clear();
                self.send(rank, piece, false).await?;
            }
        }
        Ok(true)
    }

    /// A read that failed: while the agent is connected, the rank has not
    /// written its log yet (tried again next time); else it is gone.
    async fn unread(&self, logs: &mut RankLogs, agent_id: &str) -> Result<(), Stopped> {
        if self.fleet.is_connected(agent_id) {
            return Ok(());
        }
        self.gone(logs).await
    }

    /// The rank's agent went away: said once, then its lines are over.
    async fn gone(&self, logs: &mut RankLogs) -> Result<(), Stopped> {
        logs.source = Source::Kept(String::new());
        self.send(
            logs.rank,
            "[cohort] its agent stopped answering: no more lines of this rank".to_string(),
            true,
        )
        .await
    }
}

/// The complete lines of `bytes` (without their endings, invalid UTF-8
/// replaced) and what follows the last line ending.
fn split_lines(bytes: &[u8]) -> (Vec<String>, &[u8]) {
    let end = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let lines = bytes[..end]
        .split(|b| *b == b'\n')
        .take(bytes[..end].iter().filter(|b| **b == b'\n').count())
        .map(|l| {
            let l = l.strip_suffix(b"\r").unwrap_or(l);
            String::from_utf8_lossy(l).into_owned()
        })
        .collect();
    (lines, &bytes[end..])
}

#[cfg(test)]
mod tests {
    use super::split_lines;

    #[test]
    fn lines_split_at_their_endings_and_keep_the_unfinished_one() {
        let (lines, rest) = split_lines(b"a\r\nb\n\nc");
        assert_eq!(lines, ["a", "b", ""]);
        assert_eq!(rest, b"c");
        let (lines, rest) = split_lines(b"no end");
        assert!(lines.is_empty());
        assert_eq!(rest, b"no end");
        let (lines, rest) = split_lines(b"\xff\n");
        assert_eq!(lines, ["\u{fffd}"]);
        assert!(rest.is_empty());
    }
}
