//! The searcher at the rungs, once a pass (see [`super::stopping`] for the
//! rules): records the rungs the running trials passed since the last
//! look, then stops (median), pauses or lets go on (ASHA) the ones that
//! reached a rung, and promotes the paused trials that now rank in the
//! share that goes on. Every record is in the database before anything is
//! done about it, so a new leader judges from the same records.

use super::objective::{self, Reading};
use super::stopping::{self, Ranking};
use crate::context::Context;
use crate::model::{JobState, RungRecord, Searcher, Sweep, Trial};
use crate::persistence::DatabaseError;

/// Where the sweep stands for the rules: whether more trials may still
/// reach a rung.
#[derive(Debug, Clone, Copy)]
pub struct Outlook {
    /// The searcher will start more trials.
    pub feeding: bool,
}

/// What a look at the rungs did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Acted {
    pub stopped: usize,
    pub paused: usize,
    pub promoted: usize,
}

impl Acted {
    pub fn any(&self) -> bool {
        self.stopped + self.paused + self.promoted > 0
    }
}

/// One look at sweep `sweep`'s rungs (ASHA and median only).
pub async fn look(
    ctx: &Context,
    sweep: &Sweep,
    trials: &[Trial],
    outlook: Outlook,
) -> Result<Acted, DatabaseError> {
    let mut records = ctx.db.sweep_rungs(&sweep.id).await?;
    let mut acted = Acted::default();
    let running: Vec<&Trial> = trials
        .iter()
        .filter(|t| t.state == JobState::Running)
        .collect();
    let progress = if running.is_empty() {
        Default::default()
    } else {
        ctx.db
            .latest_progress(running.iter().map(|t| t.training_id.clone()).collect())
            .await?
    };
    for t in running {
        let Some(reading) = progress
            .get(&t.training_id)
            .and_then(|e| objective::read(&sweep.objective.metric, e))
        else {
            continue;
        };
        // Others still on their way to a rung keep it open.
        let closed = !outlook.feeding
            && !trials
                .iter()
                .any(|o| o.index != t.index && !o.state.is_final() && !o.paused);
        match at_rungs(ctx, sweep, t, &reading, &mut records, closed).await? {
            Verdict::GoesOn => {}
            Verdict::Stopped => acted.stopped += 1,
            Verdict::Paused => acted.paused += 1,
        }
    }
    if sweep.searcher == Searcher::Asha {
        let active = trials.iter().any(|t| !t.state.is_final() && !t.paused);
        let closed = !outlook.feeding && !active && acted.paused == 0;
        acted.promoted = promote(ctx, sweep, trials, &records, closed).await?;
    }
    Ok(acted)
}

enum Verdict {
    GoesOn,
    Stopped,
    Paused,
}

/// Records trial `t`'s `reading` at each rung it passed without a record,
/// judging it at each in turn.
async fn at_rungs(
    ctx: &Context,
    sweep: &Sweep,
    t: &Trial,
    reading: &Reading,
    records: &mut Vec<RungRecord>,
    closed: bool,
) -> Result<Verdict, DatabaseError> {
    let Some(total) = reading.total_steps else {
        return Ok(Verdict::GoesOn);
    };
    let rungs = stopping::rungs(sweep.searcher, sweep.eta, sweep.max_trials, total);
    for (i, at) in rungs.iter().enumerate() {
        let rung = i as i32 + 1;
        if reading.step < *at {
            break;
        }
        if records
            .iter()
            .any(|r| r.trial_index == t.index && r.rung == rung)
        {
            continue;
        }
        let record = RungRecord {
            trial_index: t.index,
            rung,
            step: reading.step,
            value: reading.value,
            l0: reading.l0,
        };
        if !ctx.db.record_rung(&sweep.id, record.clone()).await? {
            continue;
        }
        records.push(record);
        let at_rung = Position::of(sweep, records, t.index, rung);
        let Some(why) = at_rung.falls_short(sweep, closed) else {
            continue;
        };
        let what = describe(sweep, reading, rung, rungs.len());
        return Ok(match sweep.searcher {
            Searcher::Asha => {
                let paused = ctx
                    .jobs
                    .pause(&t.training_id, &sweep.id, &format!("{what} is {why}"))
                    .await?;
                if paused {
                    tracing::info!(sweep_id = %sweep.id, training_id = %t.training_id, rung, "sweeps: trial paused at a rung");
                    Verdict::Paused
                } else {
                    Verdict::GoesOn
                }
            }
            _ => {
                let reason =
                    format!("STOPPED_BY_SEARCHER: {what} is {why}; its checkpoints are kept");
                super::cancel_one(ctx, &t.training_id, &reason).await;
                Verdict::Stopped
            }
        });
    }
    Ok(Verdict::GoesOn)
}

/// "loss 0.012345 at step 1200 (rung 1 of 2)", or for the frontier
/// "L0 12.3 and explained variance 0.9123 at step ...".
fn describe(sweep: &Sweep, reading: &Reading, rung: i32, of: usize) -> String {
    let value = match reading.l0 {
        Some(l0) if sweep.objective.is_frontier() => {
            format!("L0 {l0:.1} and explained variance {:.4}", reading.value)
        }
        _ => format!("{} {:.6}", sweep.objective.metric, reading.value),
    };
    format!("{value} at step {} (rung {rung} of {of})", reading.step)
}

/// A trial among the records at one rung.
struct Position {
    /// Trials recorded at the rung, itself included.
    n: usize,
    /// Of those, how many rank strictly ahead of it.
    ahead: usize,
    /// The others' values (the median rule's).
    others: Vec<f64>,
    value: f64,
}

impl Position {
    fn of(sweep: &Sweep, records: &[RungRecord], trial: i32, rung: i32) -> Position {
        let at: Vec<&RungRecord> = records.iter().filter(|r| r.rung == rung).collect();
        let scores = stopping::scores(Ranking::of(&sweep.objective), &at);
        let me = at
            .iter()
            .position(|r| r.trial_index == trial)
            .unwrap_or_default();
        Position {
            n: at.len(),
            ahead: stopping::ahead(&scores, me),
            others: at
                .iter()
                .filter(|r| r.trial_index != trial)
                .map(|r| r.value)
                .collect(),
            value: at.get(me).map_or(f64::NAN, |r| r.value),
        }
    }

    /// Why the trial does not go on from this rung; `None`: it does.
    fn falls_short(&self, sweep: &Sweep, closed: bool) -> Option<String> {
        match sweep.searcher {
            Searcher::Asha => {
                let keep = stopping::asha_keeps(self.n, sweep.eta, closed);
                let ranked = if sweep.objective.is_frontier() {
                    "on the L0 / explained-variance frontier (by distance to it; on it, by spread)"
                } else {
                    "on the objective"
                };
                if self.ahead < keep {
                    return None;
                }
                Some(if keep == 0 {
                    let few = match self.n {
                        1 => "the only trial".to_string(),
                        n => format!("one of only {n} trials"),
                    };
                    format!(
                        "{few} at this rung so far: none goes on before {} have reached it (ASHA, eta {})",
                        sweep.eta.ceil(),
                        sweep.eta
                    )
                } else {
                    format!(
                        "not among the best {keep} of the {} trials at this rung {ranked} (ASHA, eta {})",
                        self.n, sweep.eta
                    )
                })
            }
            Searcher::Median => {
                stopping::median_verdict(sweep.objective.direction, self.value, &self.others)
            }
            Searcher::Grid | Searcher::Random => None,
        }
    }
}

/// Promotes the paused trials that rank in their rung's share now, the
/// highest rung first; `closed`: no trial can reach any rung any more, so
/// the share is ceil(n / eta) and only the highest rung with a trial to
/// promote promotes (the others wait for what those do).
async fn promote(
    ctx: &Context,
    sweep: &Sweep,
    trials: &[Trial],
    records: &[RungRecord],
    closed: bool,
) -> Result<usize, DatabaseError> {
    let top = |index: i32| {
        records
            .iter()
            .filter(|r| r.trial_index == index)
            .map(|r| r.rung)
            .max()
    };
    let mut paused: Vec<(i32, &Trial)> = trials
        .iter()
        .filter(|t| t.paused && t.state == JobState::Queued)
        .filter_map(|t| top(t.index).map(|rung| (rung, t)))
        .collect();
    paused.sort_by_key(|(rung, t)| (std::cmp::Reverse(*rung), t.index));
    let mut promoted = 0;
    let mut promoted_rung = None;
    for (rung, t) in paused {
        if closed && promoted_rung.is_some_and(|r| r != rung) {
            break;
        }
        let at_rung = Position::of(sweep, records, t.index, rung);
        let keep = stopping::asha_keeps(at_rung.n, sweep.eta, closed);
        if at_rung.ahead >= keep {
            continue;
        }
        let why = format!(
            "among the best {keep} of the {} trials at rung {rung} (ASHA, eta {})",
            at_rung.n, sweep.eta
        );
        if ctx.jobs.promote(&t.training_id, &sweep.id, &why).await? {
            promoted += 1;
            promoted_rung = Some(rung);
        }
    }
    Ok(promoted)
}

/// The paused trials no rung will promote any more (the sweep starts
/// nothing and nothing runs): they end stopped, with where they stand.
pub async fn stop_unpromoted(
    ctx: &Context,
    sweep: &Sweep,
    trials: &[Trial],
) -> Result<usize, DatabaseError> {
    let records = ctx.db.sweep_rungs(&sweep.id).await?;
    let mut stopped = 0;
    for t in trials.iter().filter(|t| t.paused && !t.state.is_final()) {
        // "loss 0.02 at step 1400 (rung 1 of 2)", from its pause.
        let what = t
            .state_reason
            .strip_prefix("PAUSED: ")
            .and_then(|r| r.split(" is ").next())
            .unwrap_or("paused at a rung");
        let top = records
            .iter()
            .filter(|r| r.trial_index == t.index)
            .map(|r| r.rung)
            .max()
            .unwrap_or(1);
        let why = Position::of(sweep, &records, t.index, top)
            .falls_short(sweep, true)
            .unwrap_or_else(|| "not promoted".into());
        let reason = format!(
            "STOPPED_BY_SEARCHER: {what} is {why}, and was not promoted before the sweep's other trials ended; its checkpoints are kept"
        );
        super::cancel_one(ctx, &t.training_id, &reason).await;
        tracing::info!(sweep_id = %sweep.id, training_id = %t.training_id, "sweeps: paused trial never promoted: stopped");
        stopped += 1;
    }
    Ok(stopped)
}
