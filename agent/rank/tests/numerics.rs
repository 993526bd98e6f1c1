//! The step's numerics and the SAE's quality metrics with real `cohort-rank`
//! processes: divergence ends the run DIVERGED, accumulation equals a larger
//! batch, low-precision compute keeps f32 master weights, f16 overflows back
//! the loss scale off, TopK caps L0, and the reported metrics are the ones
//! an independent computation finds.

mod common;

use cohort_spec::progress::{Progress, ProgressLine};
use common::*;
use std::path::Path;
use tch::{Kind, Tensor};

/// `config(batch, steps, every)` with `extra` lines added to its tables.
fn with(batch: i64, steps: i64, every: i64, model: &str, optim: &str) -> String {
    config(batch, steps, every)
        .replace(
            "l1_coefficient = 0.001\n",
            &format!("l1_coefficient = 0.001\n{model}\n"),
        )
        .replace("seed = 3\n", &format!("seed = 3\n{optim}\n"))
}

fn progress(f: &Finished) -> Vec<&ProgressLine> {
    f.lines
        .iter()
        .filter(|l| matches!(l, ProgressLine::Progress(Progress { .. })))
        .collect()
}

fn tensor(path: &Path, name: &str) -> Tensor {
    Tensor::read_safetensors(path)
        .unwrap()
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no {name} in {}", path.display()))
        .1
}

#[test]
fn a_diverging_run_exits_diverged_and_never_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let text = with(32, 200, 50, "", "max_nonfinite_steps = 3")
        .replace("learning_rate = 0.001", "learning_rate = 1e30");
    let cfg = write(dir.path(), "sae.toml", &text);
    let results = run_group(&cfg, &dir.path().join("run"), 2);
    for r in &results {
        assert_eq!(r.code, Some(15), "stderr: {}", r.stderr);
        assert!(r.stderr.contains("training diverged"), "{}", r.stderr);
        assert!(!r
            .lines
            .iter()
            .any(|l| matches!(l, ProgressLine::Finished { .. })));
    }
    let diverged = results[0]
        .lines
        .iter()
        .find_map(|l| match l {
            ProgressLine::Diverged {
                step,
                nonfinite_steps,
                learning_rate,
                ..
            } => Some((*step, *nonfinite_steps, *learning_rate)),
            _ => None,
        })
        .expect("rank 0 says it diverged");
    assert_eq!(diverged.1, 4, "more than 3 in a row");
    assert!(diverged.0 < 50, "stopped early, at step {}", diverged.0);
    assert_eq!(diverged.2, 1e30);
    // nothing was written from the diverged state
    assert!(cohort_rank::checkpoint::latest(&dir.path().join("run")).is_none());
}

#[test]
fn two_ranks_accumulating_two_batches_of_64_equal_one_rank_at_256() {
    let dir = tempfile::tempdir().unwrap();
    let one = write(dir.path(), "one.toml", &with(256, 12, 0, "", ""));
    let two = write(
        dir.path(),
        "two.toml",
        &with(64, 12, 0, "", "accumulation_steps = 2"),
    );
    let r1 = run_group(&one, &dir.path().join("one"), 1);
    let r2 = run_group(&two, &dir.path().join("two"), 2);
    for r in r1.iter().chain(&r2) {
        assert_eq!(r.code, Some(0), "{}", r.stderr);
    }
    let (a, b) = (
        final_params(&dir.path().join("one")),
        final_params(&dir.path().join("two")),
    );
    for ((name, x), (_, y)) in a.iter().zip(&b) {
        let diff = (x - y).abs().max().double_value(&[]);
        assert!(diff < 1e-5, "{name}: max |diff| = {diff}");
    }
    let started = |f: &Finished| {
        f.lines.iter().find_map(|l| match l {
            ProgressLine::Started { global_batch, .. } => Some(*global_batch),
            _ => None,
        })
    };
    assert_eq!((started(&r1[0]), started(&r2[0])), (Some(256), Some(256)));
}

#[test]
fn bf16_compute_keeps_f32_master_weights_that_take_small_updates() {
    let dir = tempfile::tempdir().unwrap();
    let text = with(32, 3, 1, "dtype = \"bf16\"", "")
        .replace("learning_rate = 0.001", "learning_rate = 1e-6");
    let cfg = write(dir.path(), "sae.toml", &text);
    let run = dir.path().join("run");
    let r = run_group(&cfg, &run, 1);
    assert_eq!(r[0].code, Some(0), "{}", r[0].stderr);
    let state = |step: i64| {
        run.join("checkpoints")
            .join(format!("step-{step:08}"))
            .join("state.safetensors")
    };
    let (w1, w3) = (
        tensor(&state(1), "param.w_enc"),
        tensor(&state(3), "param.w_enc"),
    );
    assert_eq!(w1.kind(), Kind::Float);
    assert_eq!(tensor(&state(3), "adam.v.w_enc").kind(), Kind::Float);
    let delta = (&w3 - &w1).abs();
    // Two Adam updates of ~1e-6 each: far below bf16's resolution at these
    // weights (~1e-3), so bf16 weights would not have moved at all.
    let moved = delta
        .gt(0.0)
        .to_kind(Kind::Double)
        .mean(Kind::Double)
        .double_value(&[]);
    assert!(moved > 0.9, "only {moved} of the weights moved");
    assert!(delta.max().double_value(&[]) < 1e-5);
    let manifest = cohort_rank::checkpoint::latest(&run).unwrap().manifest;
    assert_eq!(
        (manifest.dtype.as_str(), manifest.weights_dtype.as_str()),
        ("bf16", "f32")
    );
}

#[test]
fn f16_overflows_are_skipped_by_backing_the_scale_off_not_counted_as_divergence() {
    let dir = tempfile::tempdir().unwrap();
    // Activations in the hundreds: 65536 x their gradients overflow f16.
    let text = with(32, 30, 0, "dtype = \"f16\"", "max_nonfinite_steps = 0")
        .replace("num_features = 64", "num_features = 64\nnoise_std = 300.0");
    let cfg = write(dir.path(), "sae.toml", &text);
    let r = run_group(&cfg, &dir.path().join("run"), 2);
    assert_eq!(r[0].code, Some(0), "{}", r[0].stderr);
    let last = progress(&r[0]).pop().cloned().expect("progress");
    let ProgressLine::Progress(Progress {
        loss_scale,
        nonfinite_steps,
        loss,
        ..
    }) = last
    else {
        unreachable!()
    };
    assert!(loss_scale < 65536.0, "the scale backed off: {loss_scale}");
    assert_eq!(nonfinite_steps, 0);
    assert!(loss.is_finite());
}

#[test]
fn topk_keeps_l0_at_most_k_and_metrics_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let text = with(
        64,
        40,
        0,
        "architecture = \"topk\"\nk = 4\naux_coefficient = 0.03125",
        "lr_schedule = \"cosine\"\nlr_warmup_steps = 5\nmax_grad_norm = 1.0",
    );
    let cfg = write(dir.path(), "sae.toml", &text);
    let r = run_group(&cfg, &dir.path().join("run"), 2);
    assert_eq!(r[0].code, Some(0), "{}", r[0].stderr);
    let lines = progress(&r[0]);
    assert!(lines.len() >= 4);
    for l in &lines {
        let ProgressLine::Progress(Progress {
            step,
            l0,
            explained_variance,
            dead_fraction,
            learning_rate,
            grad_norm,
            ..
        }) = l
        else {
            unreachable!()
        };
        assert!(*l0 <= 4.0 && *l0 > 0.0, "step {step}: l0 {l0}");
        assert!(explained_variance.is_finite() && *explained_variance <= 1.0);
        assert!((0.0..=1.0).contains(dead_fraction));
        assert!(*grad_norm > 0.0);
        let expected = if *step <= 5 {
            0.001 * *step as f64 / 5.0
        } else {
            0.001 * 0.5 * (1.0 + (std::f64::consts::PI * (*step - 6) as f64 / 34.0).cos())
        };
        assert!(
            (learning_rate - expected).abs() < 1e-12,
            "step {step}: lr {learning_rate} vs {expected}"
        );
    }
}

/// Rows of `n` x `d` standard-normal f32 values as a .npy file.
fn npy(path: &Path, n: i64, d: i64, seed: i64) {
    tch::manual_seed(seed);
    Tensor::randn([n, d], (Kind::Float, tch::Device::Cpu))
        .write_npy(path)
        .unwrap();
}

/// EV, L0 and MSE of the SAE in `state` over the rows of `x`, computed here.
fn independent_metrics(state: &Path, x: &Tensor) -> (f64, f64, f64) {
    let x = x.to_kind(Kind::Double);
    let p = |n: &str| tensor(state, &format!("param.{n}")).to_kind(Kind::Double);
    let z = x.matmul(&p("w_enc").tr()) + p("b_enc");
    let z = z.relu();
    let x_hat = z.matmul(&p("w_dec").tr()) + p("b_dec");
    let sse = (&x_hat - &x).square().sum(Kind::Double).double_value(&[]);
    let mean = x.mean_dim([0i64].as_slice(), true, Kind::Double);
    let spread = (&x - mean).square().sum(Kind::Double).double_value(&[]);
    let l0 = z.gt(0.0).sum(Kind::Double).double_value(&[]) / x.size()[0] as f64;
    let mse = sse / (x.size()[0] * x.size()[1]) as f64;
    (1.0 - sse / spread, l0, mse)
}

#[test]
fn validation_reports_the_metrics_of_the_whole_set_and_keeps_the_best() {
    let dir = tempfile::tempdir().unwrap();
    let val = dir.path().join("val.npy");
    npy(&val, 1000, 32, 11);
    let text = format!(
        "{}[validation]\npaths = [\"{}\"]\n",
        with(32, 30, 10, "b_dec_init = \"mean\"", ""),
        val.display()
    );
    let cfg = write(dir.path(), "sae.toml", &text);
    let run = dir.path().join("run");
    let r = run_group(&cfg, &run, 2);
    assert_eq!(r[0].code, Some(0), "{}", r[0].stderr);
    let validations: Vec<(i64, f64, f64, f64, f64, i64, bool)> = r[0]
        .lines
        .iter()
        .filter_map(|l| match l {
            ProgressLine::Validation {
                step,
                loss,
                mse,
                l0,
                explained_variance,
                samples,
                best,
                ..
            } => Some((
                *step,
                *loss,
                *mse,
                *l0,
                *explained_variance,
                *samples,
                *best,
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        validations.iter().map(|v| v.0).collect::<Vec<_>>(),
        vec![10, 20, 30],
        "at every checkpoint and the last step"
    );
    assert!(
        validations.iter().all(|v| v.5 == 1000),
        "the whole set, once"
    );
    // The final validation against the final checkpoint's weights, computed here.
    let x = Tensor::read_npy(&val).unwrap();
    let last = validations.last().unwrap();
    let state = run.join("checkpoints/step-00000030/state.safetensors");
    let (ev, l0, mse) = independent_metrics(&state, &x);
    assert!((last.4 - ev).abs() < 1e-5, "EV {} vs {ev}", last.4);
    assert!((last.3 - l0).abs() < 1e-9, "L0 {} vs {l0}", last.3);
    assert!(
        (last.2 - mse).abs() < 1e-6 * mse.max(1.0),
        "MSE {} vs {mse}",
        last.2
    );
    // best/ holds the lowest validation loss, and said so when written
    let lowest = validations
        .iter()
        .map(|v| v.1)
        .fold(f64::INFINITY, f64::min);
    let best = cohort_rank::checkpoint::Store::new(None, &run)
        .unwrap()
        .best()
        .unwrap()
        .expect("a best checkpoint");
    assert_eq!(best.validation_loss(), Some(lowest));
    let best_step = validations.iter().find(|v| v.1 == lowest).unwrap().0;
    assert_eq!(best.step, best_step);
    assert!(r[0].lines.iter().any(|l| matches!(l,
        ProgressLine::Checkpoint { best: true, step, .. } if *step == best_step)));
    // the manifest carries the config, the last progress and its validation
    let manifest = cohort_rank::checkpoint::latest(&run).unwrap().manifest;
    assert!(manifest.config.is_some() && manifest.progress.is_some());
    assert_eq!(
        manifest
            .validation
            .as_ref()
            .and_then(|v| v["step"].as_i64()),
        Some(30)
    );
    assert!(manifest
        .state_sha256
        .as_deref()
        .is_some_and(|d| d.len() == 64));
}

#[test]
fn a_corrupt_newest_checkpoint_is_skipped_and_the_resume_ends_bit_identical() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "sae.toml", &config(32, 60, 10));
    let straight = run_group(&cfg, &dir.path().join("straight"), 2);
    let expected = checksum(&straight[0]);

    let run = dir.path().join("resumed");
    let at = kill_after_checkpoint(&cfg, &run, 2, 30);
    assert!(at >= 30);
    let ckpts = run.join("checkpoints");
    // The newest checkpoint's state file gets a flipped byte; the one before
    // it a manifest whose parameter checksum lies.
    let newest = ckpts.join(format!("step-{at:08}/state.safetensors"));
    let mut bytes = std::fs::read(&newest).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&newest, bytes).unwrap();
    let older = ckpts.join(format!("step-{:08}/manifest.json", at - 10));
    let text = std::fs::read_to_string(&older).unwrap();
    let mut manifest: serde_json::Value = serde_json::from_str(&text).unwrap();
    manifest["param_checksum"] = "0000000000000000".into();
    std::fs::write(&older, manifest.to_string()).unwrap();

    let resumed = run_group(&cfg, &run, 2);
    assert!(
        resumed.iter().all(|r| r.code == Some(0)),
        "{}",
        resumed[0].stderr
    );
    assert_eq!(start_step(&resumed[0]), Some(at - 20));
    let rejected: Vec<i64> = resumed[0]
        .lines
        .iter()
        .filter_map(|l| match l {
            ProgressLine::CheckpointRejected { step, .. } => Some(*step),
            _ => None,
        })
        .collect();
    assert_eq!(rejected, vec![at, at - 10]);
    assert!(
        resumed[0].stderr.contains("SHA-256"),
        "{}",
        resumed[0].stderr
    );
    assert_eq!(checksum(&resumed[0]), expected);
    assert_eq!(checksum(&resumed[1]), expected);
}

#[test]
fn with_no_usable_checkpoint_the_run_fails_rather_than_start_over() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "sae.toml", &config(32, 20, 10));
    let run = dir.path().join("run");
    assert!(run_group(&cfg, &run, 1).iter().all(|r| r.code == Some(0)));
    for step in [10, 20] {
        let state = run.join(format!("checkpoints/step-{step:08}/state.safetensors"));
        std::fs::write(&state, b"not a safetensors file").unwrap();
    }
    let again = run_group(&cfg, &run, 1);
    assert_eq!(again[0].code, Some(12), "{}", again[0].stderr);
    assert!(
        again[0].stderr.contains("no usable checkpoint"),
        "{}",
        again[0].stderr
    );
}

#[test]
fn a_resume_continues_every_part_of_the_state_exactly() {
    // Schedule, clipping, accumulation, f16 loss scaling, TopK with the
    // auxiliary loss over the dead-latent record, b_dec from the data: all
    // of it must resume where it stood.
    let dir = tempfile::tempdir().unwrap();
    let text = with(
        32,
        60,
        10,
        "architecture = \"topk\"\nk = 4\naux_coefficient = 0.03125\ndtype = \"f16\"\nb_dec_init = \"mean\"\ndead_window_samples = 2000",
        "lr_schedule = \"cosine\"\nlr_warmup_steps = 8\nlr_min_ratio = 0.1\nmax_grad_norm = 0.5\naccumulation_steps = 2\nl1_warmup_steps = 20",
    );
    let cfg = write(dir.path(), "sae.toml", &text);
    let straight = run_group(&cfg, &dir.path().join("straight"), 2);
    assert!(
        straight.iter().all(|r| r.code == Some(0)),
        "{}",
        straight[0].stderr
    );
    let expected = checksum(&straight[0]);

    let run = dir.path().join("resumed");
    let at = kill_after_checkpoint(&cfg, &run, 2, 30);
    assert!((30..60).contains(&at), "interrupted at step {at}");
    let resumed = run_group(&cfg, &run, 2);
    assert!(
        resumed.iter().all(|r| r.code == Some(0)),
        "{}",
        resumed[0].stderr
    );
    assert_eq!(start_step(&resumed[0]), Some(at));
    assert_eq!(checksum(&resumed[0]), expected);
    assert_eq!(checksum(&resumed[1]), expected);
    // and the progress after the resume reports what the straight run did
    let last = |f: &Finished| match progress(f).pop() {
        Some(ProgressLine::Progress(Progress {
            learning_rate,
            loss_scale,
            dead_fraction,
            ..
        })) => (*learning_rate, *loss_scale, *dead_fraction),
        _ => panic!("no progress"),
    };
    assert_eq!(last(&resumed[0]), last(&straight[0]));
}
