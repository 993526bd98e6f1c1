//! What a sweep's next trial is: the searcher's next draw whose config is
//! valid, and the training that runs it.

use crate::model::{Searcher, Sweep};
use crate::persistence::NewTraining;
use cohort_spec::sweep::{apply, display, Params};
use cohort_spec::{ConfigError, Workload};
use std::collections::BTreeMap;

/// Draws in a row whose config is not valid before the random searcher
/// gives up (the sweep fails, naming the last reason).
pub const MAX_INVALID_DRAWS: i32 = 100;

/// The next trial of a sweep.
#[derive(Debug)]
pub enum Next {
    Trial {
        draw: i32,
        params: Params,
        config: Box<Workload>,
    },
    /// Every combination of a finite space was drawn.
    Exhausted,
    /// [`MAX_INVALID_DRAWS`] draws in a row gave configs that are not valid.
    Invalid { last: ConfigError },
}

/// The draws a sweep has in all: the grid's combinations (a finite space
/// is drawn without replacement by the random searchers too), or
/// unbounded.
pub fn draws(sweep: &Sweep) -> Option<usize> {
    match sweep.searcher {
        Searcher::Grid => Some(sweep.space.grid().map_or(0, |g| g.len())),
        Searcher::Random | Searcher::Asha | Searcher::Median => sweep.space.draws(),
    }
}

/// The first draw after `after` (none yet: `None`) that gives a valid config.
pub fn next(sweep: &Sweep, after: Option<i32>) -> Next {
    let first = after.map_or(0, |d| d + 1);
    match sweep.searcher {
        Searcher::Grid => {
            let Ok(grid) = sweep.space.grid() else {
                return Next::Exhausted;
            };
            // Every combination was checked when the sweep was created.
            let Some(params) = usize::try_from(first).ok().and_then(|i| grid.get(i)) else {
                return Next::Exhausted;
            };
            match apply(&sweep.config, params) {
                Ok(config) => Next::Trial {
                    draw: first,
                    params: params.clone(),
                    config: Box::new(config),
                },
                Err(last) => Next::Invalid { last },
            }
        }
        Searcher::Random | Searcher::Asha | Searcher::Median => {
            let mut last = None;
            for draw in first..first.saturating_add(MAX_INVALID_DRAWS) {
                let Some(params) = sweep.space.draw(sweep.seed, draw as u64) else {
                    return Next::Exhausted;
                };
                match apply(&sweep.config, &params) {
                    Ok(config) => {
                        return Next::Trial {
                            draw,
                            params,
                            config: Box::new(config),
                        }
                    }
                    Err(e) => last = Some(e),
                }
            }
            Next::Invalid {
                last: last.expect("at least one draw"),
            }
        }
    }
}

/// The labels of a trial: `sweep=<id>` and each param that makes a valid
/// label (what `train list --label` and the console's comparison read).
pub fn labels(sweep: &Sweep, params: &Params) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([("sweep".to_string(), sweep.id.clone())]);
    for (key, value) in params {
        let value = display(value);
        if crate::model::label_key_ok(key) && crate::model::label_value_ok(&value) {
            labels.insert(key.clone(), value);
        }
    }
    labels
}

/// Trial `index`'s training: idempotent on `<sweep id>/trial-<index>`, so
/// a new leader that retries a trial creates it once.
pub fn training(sweep: &Sweep, index: i32, params: &Params, config: Workload) -> NewTraining {
    let name = if sweep.display_name.is_empty() {
        sweep.id.clone()
    } else {
        sweep.display_name.clone()
    };
    NewTraining {
        request_id: Some(format!("{}/trial-{index}", sweep.id)),
        display_name: format!("{name} trial {index}"),
        config,
        gpu_request: sweep.trial.gpu_request.clone(),
        priority: sweep.trial.priority,
        priority_class: sweep.trial.priority_class.clone(),
        borrow: true,
        max_restarts: sweep.trial.max_restarts,
        trace_context: None,
        team: sweep.team.clone(),
        creator: sweep.creator.clone(),
        labels: labels(sweep, params),
        audit: None,
        max_queued: None,
    }
}
