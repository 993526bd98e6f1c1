//! What an out-of-memory exit of the built-in SAE leads to (a program
//! restarts unchanged within its budget).
//!
//! `runtime.oom_policy = "adapt"` (the default): the next attempt's
//! micro-batch (`optim.batch_size`) is the largest divisor of the per-rank
//! batch (`batch_size x accumulation_steps`) that is at most 75 % of the
//! current micro-batch and at least `runtime.min_micro_batch`, and
//! `accumulation_steps` rises so that micro-batch x accumulation = per-rank
//! batch: every optimizer step sees the same samples, so the optimisation is
//! unchanged. No such divisor (or more than 1024 micro-batches a step): the
//! training fails. `"fail"`: it fails at once. A config that sets
//! `optim.allow_batch_shrink` keeps its old meaning: the per-rank batch is
//! halved (the global batch changes).

use cohort_spec::config::OomPolicy;
use cohort_spec::TrainingConfig;

use cohort_spec::elastic::MAX_ACCUMULATION;

#[derive(Debug, Clone, PartialEq)]
pub enum OomNext {
    /// Restart with this config; the note says what changed.
    Restart(Box<TrainingConfig>, String),
    /// Restart as it was.
    Unchanged,
    /// Fail the training; why.
    Fail(String),
}

pub fn after_oom(config: &TrainingConfig) -> OomNext {
    let o = &config.optim;
    if o.allow_batch_shrink {
        return match shrunk_batch(config) {
            Some((next, note)) => OomNext::Restart(Box::new(next), note),
            None => OomNext::Unchanged,
        };
    }
    match config.runtime.oom_policy {
        OomPolicy::Fail => OomNext::Fail("runtime.oom_policy = \"fail\"".to_string()),
        OomPolicy::Adapt => {
            let (micro, accumulation) = (o.batch_size, o.accumulation_steps);
            let per_rank = micro * accumulation;
            let floor = config.runtime.min_micro_batch.max(1);
            let next = (floor..=micro * 3 / 4)
                .rev()
                .find(|d| per_rank % d == 0 && per_rank / d <= MAX_ACCUMULATION);
            match next {
                Some(d) => {
                    let mut next = config.clone();
                    next.optim.batch_size = d;
                    next.optim.accumulation_steps = per_rank / d;
                    let note = format!(
                        "micro-batch {micro} -> {d}, accumulation {accumulation} -> {} \
                         (per-rank batch {per_rank} unchanged: oom_policy adapt)",
                        per_rank / d
                    );
                    OomNext::Restart(Box::new(next), note)
                }
                None => OomNext::Fail(format!(
                    "no micro-batch below {micro} divides the per-rank batch {per_rank} \
                     within runtime.min_micro_batch {floor} and {MAX_ACCUMULATION} micro-batches a step"
                )),
            }
        }
    }
}

/// `optim.allow_batch_shrink`: the per-rank batch halved, when > 1.
pub fn shrunk_batch(config: &TrainingConfig) -> Option<(TrainingConfig, String)> {
    let before = config.optim.batch_size;
    if !config.optim.allow_batch_shrink || before <= 1 {
        return None;
    }
    let mut next = config.clone();
    next.optim.batch_size = before / 2;
    let note = format!(
        "per-rank batch {before} -> {} (allow_batch_shrink)",
        before / 2
    );
    Some((next, note))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra_optim: &str, runtime: &str) -> TrainingConfig {
        TrainingConfig::from_toml(&format!(
            "[model]\nd_in = 4\n[optim]\nbatch_size = 256\nsteps = 1\n{extra_optim}\n[data.synthetic]\nnum_samples = 4\n[runtime]\n{runtime}\n"
        ))
        .unwrap()
    }

    fn restart(next: OomNext) -> (i64, i64, String) {
        match next {
            OomNext::Restart(c, note) => (c.optim.batch_size, c.optim.accumulation_steps, note),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn adapt_cuts_the_micro_batch_by_a_quarter_and_keeps_the_per_rank_batch() {
        let (b, a, note) = restart(after_oom(&config("", "")));
        assert_eq!((b, a), (128, 2), "the largest divisor of 256 at most 192");
        assert_eq!(note, "micro-batch 256 -> 128, accumulation 1 -> 2 (per-rank batch 256 unchanged: oom_policy adapt)");
        // Again from there: at most 96 -> 64, 4 micro-batches.
        let mut c = config("", "");
        c.optim.batch_size = 128;
        c.optim.accumulation_steps = 2;
        assert_eq!(restart(after_oom(&c)).0, 64);
        // 300 = 2^2 3 5^2: at most 225 -> 150.
        c.optim.batch_size = 300;
        c.optim.accumulation_steps = 1;
        let (b, a, _) = restart(after_oom(&c));
        assert_eq!((b, a), (150, 2));
    }

    #[test]
    fn the_floor_and_the_fail_policy_end_the_training() {
        let mut c = config("", "min_micro_batch = 200");
        assert!(matches!(after_oom(&c), OomNext::Fail(why) if why.contains("min_micro_batch 200")));
        c.optim.batch_size = 1;
        c.runtime.min_micro_batch = 1;
        assert!(matches!(after_oom(&c), OomNext::Fail(_)), "nothing below 1");
        let c = config("", "oom_policy = \"fail\"");
        assert_eq!(
            after_oom(&c),
            OomNext::Fail("runtime.oom_policy = \"fail\"".into())
        );
    }

    #[test]
    fn allow_batch_shrink_keeps_its_meaning() {
        let (b, a, note) = restart(after_oom(&config("allow_batch_shrink = true", "")));
        assert_eq!(
            (b, a, note.as_str()),
            (128, 1, "per-rank batch 256 -> 128 (allow_batch_shrink)")
        );
        let mut c = config("allow_batch_shrink = true", "");
        c.optim.batch_size = 1;
        assert_eq!(after_oom(&c), OomNext::Unchanged);
    }
}
