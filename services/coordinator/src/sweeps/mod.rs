//! The sweeps' searcher (docs/sweeps.md), on the leader: every pass, each
//! RUNNING sweep gets new trials while fewer than `max_concurrent` have not
//! ended and fewer than `max_trials` (or the grid) were started, and ends
//! once its last trial has; a sweep whose `max_gpu_hours` is spent starts
//! nothing more and cancels its running trials. Everything it knows is in
//! the database (a trial's row is written with its training, its draw
//! says where the searcher was), so a new leader goes on from there.

pub mod objective;
pub mod rungs;
pub mod searcher;
pub mod stopping;

use crate::context::Context;
use crate::model::{JobState, Sweep, SweepState, Trial, BUDGET_SPENT};
use crate::persistence::sweeps::TrialAdded;
use crate::persistence::DatabaseError;
use searcher::Next;
use std::time::Duration;

/// How often the searcher looks at every RUNNING sweep (a create wakes it
/// at once).
pub const PASS_EVERY: Duration = Duration::from_secs(1);

/// Runs the searcher until `shutdown`.
pub async fn run(ctx: Context, shutdown: impl std::future::Future<Output = ()>) {
    tokio::pin!(shutdown);
    let mut tick = tokio::time::interval(PASS_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let wake = ctx.sweeps_wake.clone();
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tick.tick() => {}
            _ = wake.notified() => {}
        }
        pass(&ctx).await;
    }
}

/// One look at every sweep that needs one.
pub async fn pass(ctx: &Context) {
    match ctx.db.orphaned_trials().await {
        Ok(ids) => {
            for id in ids {
                cancel_one(ctx, &id, "its sweep ended").await;
            }
        }
        Err(e) => tracing::warn!(error = %e, "sweeps: cannot read the trials of ended sweeps"),
    }
    let sweeps = match ctx.db.running_sweeps().await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "sweeps: cannot read the running sweeps");
            return;
        }
    };
    for sweep in sweeps {
        if let Err(e) = advance(ctx, &sweep).await {
            tracing::warn!(sweep_id = %sweep.id, error = %e, "sweeps: a pass over the sweep failed");
        }
    }
}

/// Cancels the trials of sweep `id` that have not ended.
pub async fn cancel_trials(ctx: &Context, id: &str, reason: &str) -> Result<(), DatabaseError> {
    for t in ctx.db.sweep_trials(id).await? {
        if !t.state.is_final() {
            cancel_one(ctx, &t.training_id, reason).await;
        }
    }
    Ok(())
}

pub(crate) async fn cancel_one(ctx: &Context, training_id: &str, reason: &str) {
    match ctx.jobs.cancel(training_id, reason, None).await {
        Ok(_) => tracing::info!(training_id, reason, "sweeps: trial cancelled"),
        // It ended meanwhile.
        Err(DatabaseError::Logical(crate::persistence::LogicalError::IllegalTransition {
            ..
        })) => {}
        Err(e) => tracing::warn!(training_id, error = %e, "sweeps: cannot cancel a trial"),
    }
}

/// GPU-hours the sweep's trials spent, when it has a budget to hold.
async fn spent(
    ctx: &Context,
    sweep: &Sweep,
    trials: &[Trial],
) -> Result<Option<f64>, DatabaseError> {
    if sweep.max_gpu_hours <= 0.0 {
        return Ok(None);
    }
    let ids = trials.iter().map(|t| t.training_id.clone()).collect();
    let seconds: f64 = ctx.db.gpu_seconds(ids).await?.values().sum();
    Ok(Some(seconds / 3600.0))
}

/// The sweep's trials after a look at the rungs (ASHA and median): the
/// paused ones that no rung will promote any more end once nothing is
/// left to promote and nothing more will start.
async fn at_rungs(ctx: &Context, sweep: &Sweep, limit: i32) -> Result<Vec<Trial>, DatabaseError> {
    let trials = ctx.db.sweep_trials(&sweep.id).await?;
    if !sweep.searcher.stops_early() {
        return Ok(trials);
    }
    let outlook = rungs::Outlook {
        feeding: (trials.len() as i32) < limit,
    };
    let acted = rungs::look(ctx, sweep, &trials, outlook).await?;
    let settled =
        !acted.any() && !outlook.feeding && trials.iter().all(|t| t.state.is_final() || t.paused);
    let stopped = if settled {
        rungs::stop_unpromoted(ctx, sweep, &trials).await?
    } else {
        0
    };
    if acted.any() || stopped > 0 {
        return ctx.db.sweep_trials(&sweep.id).await;
    }
    Ok(trials)
}

async fn advance(ctx: &Context, sweep: &Sweep) -> Result<(), DatabaseError> {
    let limit = searcher::draws(sweep).map_or(sweep.max_trials, |n| sweep.max_trials.min(n as i32));
    let trials = at_rungs(ctx, sweep, limit).await?;
    // A paused trial holds no GPUs and waits for no pass: it does not count.
    let mut active = trials
        .iter()
        .filter(|t| !t.state.is_final() && !t.paused)
        .count() as i32;
    let mut started = trials.len() as i32;
    let mut last_draw = trials.last().map(|t| t.draw);
    let budget_spent = spent(ctx, sweep, &trials)
        .await?
        .filter(|h| *h >= sweep.max_gpu_hours);
    if let Some(hours) = budget_spent {
        let reason = format!(
            "{BUDGET_SPENT} ({}) is spent ({hours:.3} GPU-hours)",
            sweep.max_gpu_hours
        );
        cancel_trials(ctx, &sweep.id, &reason).await?;
        let trials = ctx.db.sweep_trials(&sweep.id).await?;
        return finish(
            ctx,
            sweep,
            &trials,
            &format!("max_gpu_hours spent after {} trials", trials.len()),
        )
        .await;
    }
    while active < sweep.max_concurrent && started < limit {
        match searcher::next(sweep, last_draw) {
            Next::Trial {
                draw,
                params,
                config,
            } => {
                let new = searcher::training(sweep, started, &params, *config);
                match ctx
                    .db
                    .add_trial(&sweep.id, started, draw, &params, new)
                    .await?
                {
                    TrialAdded::Added(created) => {
                        ctx.jobs.arrived();
                        tracing::info!(sweep_id = %sweep.id, trial = started, draw, training_id = %created.training.id, "sweeps: trial started");
                    }
                    TrialAdded::SweepEnded => return Ok(()),
                }
                started += 1;
                active += 1;
                last_draw = Some(draw);
            }
            Next::Exhausted => {
                // Fewer valid combinations than the grid's size: done.
                if active == 0 {
                    return finish(
                        ctx,
                        sweep,
                        &trials,
                        &format!("all {} trials ended", trials.len()),
                    )
                    .await;
                }
                break;
            }
            Next::Invalid { last } => {
                let reason = format!(
                    "INVALID_DRAWS: {} draws in a row gave configs that are not valid; the last: {last}",
                    searcher::MAX_INVALID_DRAWS
                );
                cancel_trials(ctx, &sweep.id, &reason).await?;
                let trials = ctx.db.sweep_trials(&sweep.id).await?;
                return end(ctx, sweep, &trials, SweepState::Failed, &reason).await;
            }
        }
    }
    if active == 0 && started >= limit {
        finish(
            ctx,
            sweep,
            &trials,
            &format!("all {} trials ended", trials.len()),
        )
        .await?;
    }
    Ok(())
}

/// Ends a sweep whose trials all ended: SUCCEEDED when one of them did.
async fn finish(
    ctx: &Context,
    sweep: &Sweep,
    trials: &[Trial],
    why: &str,
) -> Result<(), DatabaseError> {
    if trials.iter().any(|t| !t.state.is_final()) {
        return Ok(());
    }
    let succeeded = trials
        .iter()
        .filter(|t| t.state == JobState::Succeeded)
        .count();
    let (state, reason) = if succeeded > 0 {
        (
            SweepState::Succeeded,
            format!("{why}: {succeeded} succeeded"),
        )
    } else {
        (SweepState::Failed, format!("{why}: none succeeded"))
    };
    end(ctx, sweep, trials, state, &reason).await
}

async fn end(
    ctx: &Context,
    sweep: &Sweep,
    trials: &[Trial],
    state: SweepState,
    reason: &str,
) -> Result<(), DatabaseError> {
    if trials.iter().any(|t| !t.state.is_final()) {
        // Cancelled trials end as their ranks stop: a later pass ends it.
        return Ok(());
    }
    if ctx.db.finish_sweep(&sweep.id, state, reason).await? {
        tracing::info!(sweep_id = %sweep.id, state = state.as_str(), reason, "sweeps: sweep ended");
    }
    Ok(())
}
