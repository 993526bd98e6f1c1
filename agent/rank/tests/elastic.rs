//! An elastic run: real `cohort-rank` processes on real c10d (gloo), resized
//! 2 -> 4 -> 1 -> 2 ranks between checkpoints as the coordinator resizes a
//! training (a notice, a checkpoint at the step, the gang started again at
//! the new size from it, each size's micro-batch and accumulation derived by
//! `TrainingConfig::at_world_size`). Its loss at every step and its final
//! parameters match a fixed 2-rank run's within f32 reduction-order noise:
//! every size reads the same samples at every step (the sampler reads a
//! step's samples by the global batch alone; `data::sampler` tests compare
//! the ids) and averages over the same global batch.

mod common;

use cohort_spec::progress::{Progress, ProgressLine};
use cohort_spec::TrainingConfig;
use common::*;
use std::collections::BTreeMap;
use std::path::Path;

const STEPS: i64 = 60;
const LARGEST: i64 = 4;

/// Written for 4 ranks: micro-batches of at most 12, a global batch of 48,
/// 1000 samples (not a multiple of 48: epochs end mid-batch), a cosine
/// schedule with warmup (it must follow the step, not the size).
fn base() -> TrainingConfig {
    TrainingConfig::from_toml(&format!(
        r#"
[model]
d_in = 32
d_sae = 128
l1_coefficient = 0.001
[optim]
learning_rate = 0.002
batch_size = 12
global_batch = 48
steps = {STEPS}
seed = 3
lr_schedule = "cosine"
lr_warmup_steps = 8
[checkpoint]
every_steps = 10
keep = 100
[data.synthetic]
num_samples = 1000
num_features = 64
[runtime]
log_every_steps = 1
rendezvous_timeout_s = 20
collective_timeout_s = 10
"#
    ))
    .expect("a valid config")
}

/// The config as `world` ranks run it, written to `dir`.
fn at(dir: &Path, world: i64) -> std::path::PathBuf {
    let config = base()
        .at_world_size(world, LARGEST)
        .expect("a size of the range");
    let text = serde_json::to_string(&config).expect("serialises");
    write(dir, &format!("at-{world}.json"), &text)
}

/// Step -> (loss, learning rate, samples digest) from rank 0's progress
/// lines.
fn losses(runs: &[&Finished]) -> BTreeMap<i64, (f64, f64, String)> {
    runs.iter()
        .flat_map(|r| r.lines.iter())
        .filter_map(|l| match l {
            ProgressLine::Progress(Progress {
                step,
                loss,
                learning_rate,
                samples_digest,
                ..
            }) => Some((*step, (*loss, *learning_rate, samples_digest.clone()))),
            _ => None,
        })
        .collect()
}

#[test]
fn a_run_resized_2_4_1_2_matches_a_fixed_two_rank_run_at_every_step() {
    let dir = tempfile::tempdir().unwrap();
    let fixed = run_group(&at(dir.path(), 2), &dir.path().join("fixed"), 2);
    assert!(
        fixed.iter().all(|r| r.code == Some(0)),
        "{}",
        fixed[0].stderr
    );

    // Resized after steps 15, 30 and 45: a notice heard at the step before.
    let run = dir.path().join("elastic");
    let mut segments = Vec::new();
    for (world, notice) in [(2, Some(14)), (4, Some(29)), (1, Some(44)), (2, None)] {
        let config = at(dir.path(), world);
        let env: Vec<(&str, String)> = notice
            .map(|n| ("COHORT_FAULT_PREEMPT_AT_STEP", n.to_string()))
            .into_iter()
            .collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let out = run_group_with(&config, &run, world, &env);
        let want = if notice.is_some() { 16 } else { 0 };
        for r in &out {
            assert_eq!(r.code, Some(want), "{world} ranks: {}", r.stderr);
        }
        let resumed_at = start_step(&out[0]).expect("started");
        segments.push((world, resumed_at, out.into_iter().next().expect("rank 0")));
    }
    let starts: Vec<(i64, i64)> = segments.iter().map(|(w, s, _)| (*w, *s)).collect();
    assert_eq!(starts, [(2, 0), (4, 15), (1, 30), (2, 45)]);

    let fixed = losses(&[&fixed[0]]);
    let elastic = losses(&segments.iter().map(|(_, _, r)| r).collect::<Vec<_>>());
    assert_eq!(fixed.len(), STEPS as usize);
    assert_eq!(
        elastic.keys().collect::<Vec<_>>(),
        fixed.keys().collect::<Vec<_>>(),
        "every step once"
    );
    // f32 sums in another order: 1e-5 relative at every step (what this
    // run sees is printed).
    let mut worst: f64 = 0.0;
    let mut digests = std::collections::BTreeSet::new();
    for (step, (loss, lr, samples)) in &fixed {
        let (e_loss, e_lr, e_samples) = &elastic[step];
        let (e_loss, e_lr) = (*e_loss, *e_lr);
        assert_eq!(*lr, e_lr, "step {step}: the schedule follows the step");
        // The same sample ids at every step, whatever the size.
        assert_eq!(samples.len(), 16, "step {step}: {samples:?}");
        assert_eq!(samples, e_samples, "step {step}: other samples");
        digests.insert(samples.clone());
        let rel = (loss - e_loss).abs() / loss.abs().max(1e-12);
        worst = worst.max(rel);
        assert!(rel < 1e-5, "step {step}: loss {loss} vs {e_loss} ({rel:e})");
    }
    eprintln!("largest relative loss difference over {STEPS} steps: {worst:e}");
    // And the digest tells steps apart (each step reads other samples).
    assert!(digests.len() > STEPS as usize / 2, "{}", digests.len());
    let (a, b) = (final_params(&dir.path().join("fixed")), final_params(&run));
    for ((name, x), (_, y)) in a.iter().zip(&b) {
        let diff = (x - y).abs().max().double_value(&[]);
        assert!(diff < 1e-4, "{name}: max |diff| = {diff}");
    }
}
