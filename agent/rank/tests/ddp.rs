//! Data-parallel correctness with real `cohort-rank` processes and real c10d
//! (gloo) on 127.0.0.1.

mod common;

use cohort_spec::progress::{Progress, ProgressLine};
use common::*;
use std::time::Duration;

#[test]
fn two_and_four_ranks_keep_bit_identical_parameters() {
    for world in [2, 4] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = write(dir.path(), "sae.toml", &config(32, 20, 0));
        let results = run_group(&cfg, &dir.path().join("run"), world);
        for r in &results {
            assert_eq!(r.code, Some(0), "world {world}: {}", r.stderr);
        }
        let sums: Vec<String> = results.iter().map(checksum).collect();
        assert!(
            sums.iter().all(|s| s == &sums[0]),
            "world {world}: {sums:?}"
        );
        // every rank reports its own stats, with communication time measured
        for (rank, r) in results.iter().enumerate() {
            let comm = r.lines.iter().find_map(|l| match l {
                ProgressLine::RankStats {
                    rank: k, comm_ms, ..
                } if *k == rank as i64 => Some(*comm_ms),
                _ => None,
            });
            assert!(
                comm.is_some_and(|c| c > 0.0),
                "rank {rank} stats: {:?}",
                r.lines
            );
        }
    }
}

#[test]
fn two_ranks_at_batch_b_match_one_rank_at_batch_2b() {
    let dir = tempfile::tempdir().unwrap();
    let one = write(dir.path(), "one.toml", &config(64, 50, 0));
    let two = write(dir.path(), "two.toml", &config(32, 50, 0));
    let r1 = run_group(&one, &dir.path().join("one"), 1);
    let r2 = run_group(&two, &dir.path().join("two"), 2);
    assert!(r1.iter().chain(&r2).all(|r| r.code == Some(0)));
    let (a, b) = (
        final_params(&dir.path().join("one")),
        final_params(&dir.path().join("two")),
    );
    assert_eq!(a.len(), 4);
    for ((name, x), (_, y)) in a.iter().zip(&b) {
        let diff = (x - y).abs().max().double_value(&[]);
        assert!(diff < 1e-5, "{name}: max |diff| = {diff}");
    }
    // and the loss fell
    let losses: Vec<f64> = r1[0]
        .lines
        .iter()
        .filter_map(|l| match l {
            ProgressLine::Progress(Progress { loss, .. }) => Some(*loss),
            _ => None,
        })
        .collect();
    // Each window's loss is one batch's: compare three windows at each end.
    let ends = |w: &[f64]| w.iter().sum::<f64>() / w.len() as f64;
    let (first, last) = (ends(&losses[..3]), ends(&losses[losses.len() - 3..]));
    assert!(last < first * 0.8, "{losses:?}");
}

#[test]
fn killed_and_resumed_run_reaches_the_uninterrupted_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "sae.toml", &config(32, 60, 10));
    let straight = run_group(&cfg, &dir.path().join("straight"), 2);
    let expected = checksum(&straight[0]);

    // Interrupted: kill -9 both ranks right after the step-20 checkpoint.
    let run = dir.path().join("resumed");
    let at = kill_after_checkpoint(&cfg, &run, 2, 20);
    assert!((20..60).contains(&at), "interrupted at step {at}");

    let resumed = run_group(&cfg, &run, 2);
    assert!(resumed.iter().all(|r| r.code == Some(0)));
    assert_eq!(start_step(&resumed[0]), Some(at));
    assert_eq!(checksum(&resumed[0]), expected);
    assert_eq!(checksum(&resumed[1]), expected);
}

#[test]
fn a_killed_peer_makes_the_survivor_exit_with_the_infrastructure_code() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "sae.toml", &config(32, 100_000, 0));
    let port = free_port();
    let survivor = spawn(&cfg, &dir.path().join("run"), 0, 2, port, &[]);
    let mut victim = spawn(&cfg, &dir.path().join("run"), 1, 2, port, &[]);
    // wait until training is under way
    loop {
        let line = victim
            .lines
            .recv_timeout(Duration::from_secs(60))
            .expect("victim trains");
        if matches!(ProgressLine::parse(&line), Some(ProgressLine::RankStats { step, .. }) if step >= 10)
        {
            break;
        }
    }
    victim.child.kill().unwrap();
    victim.child.wait().unwrap();
    let done = finish(survivor, Duration::from_secs(30));
    assert_eq!(done.code, Some(11), "stderr: {}", done.stderr);
    assert!(
        done.stderr.contains("lost the process group"),
        "{}",
        done.stderr
    );
}

#[test]
fn every_allreduce_mode_trains_the_same_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let mut finals = Vec::new();
    for mode in ["overlap", "flat", "per_param"] {
        let text = format!("{}allreduce = \"{mode}\"\n", config(32, 30, 0));
        let cfg = write(dir.path(), &format!("{mode}.toml"), &text);
        let run = dir.path().join(mode);
        let results = run_group(&cfg, &run, 2);
        assert!(
            results.iter().all(|r| r.code == Some(0)),
            "{mode}: {}",
            results[0].stderr
        );
        assert_eq!(checksum(&results[0]), checksum(&results[1]), "{mode}");
        finals.push((mode, final_params(&run)));
    }
    let (_, reference) = &finals[0];
    for (mode, params) in &finals[1..] {
        for ((name, x), (_, y)) in reference.iter().zip(params) {
            let diff = (x - y).abs().max().double_value(&[]);
            assert!(
                diff < 1e-5,
                "{mode} vs overlap, {name}: max |diff| = {diff}"
            );
        }
    }
}

#[test]
fn a_run_resumed_at_its_last_step_reports_the_final_loss() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "sae.toml", &config(32, 20, 10));
    let run = dir.path().join("run");
    let finished_loss = |results: &[Finished]| {
        results[0]
            .lines
            .iter()
            .find_map(|l| match l {
                ProgressLine::Finished { loss, .. } => Some(*loss),
                _ => None,
            })
            .expect("a finished line")
    };
    let first = run_group(&cfg, &run, 2);
    assert!(first.iter().all(|r| r.code == Some(0)));
    let again = run_group(&cfg, &run, 2);
    assert!(
        again.iter().all(|r| r.code == Some(0)),
        "{}",
        again[0].stderr
    );
    let (before, after) = (finished_loss(&first), finished_loss(&again));
    assert!(after.is_finite(), "loss {after}");
    // the final parameters on the last batch: the last step's loss was taken
    // just before its update, so the two are close, not equal
    assert!(
        (after - before).abs() <= 0.05 * before.abs(),
        "{before} vs {after}"
    );
    assert_eq!(checksum(&first[0]), checksum(&again[0]));
}

#[test]
fn small_buckets_and_bf16_sums_keep_the_ranks_identical_and_close_to_f32() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, extra: &str| {
        let text = format!("{}{extra}", config(32, 30, 0));
        let cfg = write(dir.path(), &format!("{name}.toml"), &text);
        let out = dir.path().join(name);
        let results = run_group(&cfg, &out, 2);
        assert!(
            results.iter().all(|r| r.code == Some(0)),
            "{name}: {}",
            results[0].stderr
        );
        assert_eq!(
            checksum(&results[0]),
            checksum(&results[1]),
            "{name}: ranks agree"
        );
        final_params(&out)
    };
    let flat = run("flat", "");
    // 0.01 MiB buckets: the decoder's and the encoder's gradients each go
    // out as several collectives, all in flight at once.
    let buckets = run("buckets", "allreduce = \"overlap\"\nbucket_mb = 0.01\n");
    for ((name, x), (_, y)) in flat.iter().zip(&buckets) {
        let diff = (x - y).abs().max().double_value(&[]);
        assert!(diff < 1e-5, "buckets vs flat, {name}: max |diff| = {diff}");
    }
    // bf16 on the wire: close to the f32 sums, not equal.
    for extra in [
        "allreduce_dtype = \"bf16\"\n",
        "allreduce = \"overlap\"\nbucket_mb = 0.01\nallreduce_dtype = \"bf16\"\n",
    ] {
        let bf16 = run(&format!("bf16-{}", extra.len()), extra);
        let mut largest: f64 = 0.0;
        for ((name, x), (_, y)) in flat.iter().zip(&bf16) {
            let diff = (x - y).abs().max().double_value(&[]);
            let scale = x.abs().max().double_value(&[]).max(1e-3);
            assert!(
                diff / scale < 0.05,
                "bf16 vs f32, {name}: max |diff| = {diff} of {scale}"
            );
            largest = largest.max(diff);
        }
        assert!(
            largest > 0.0,
            "bf16 sums round: the parameters differ a little"
        );
    }
}

/// A preemption notice heard by one rank alone (SIGUSR1, as the agent
/// sends it) stops the whole gang after the same step: rank 0 writes that
/// step's checkpoint, every rank exits PREEMPTED (16), and the resumed run
/// reaches the parameters of a run never preempted.
#[test]
fn a_notice_to_one_rank_stops_the_gang_at_one_step_and_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "sae.toml", &config(32, 400, 1000));
    let straight = run_group(&cfg, &dir.path().join("straight"), 2);
    let expected = checksum(&straight[0]);

    let run = dir.path().join("preempted");
    let port = free_port();
    let leader = spawn(&cfg, &run, 0, 2, port, &[]);
    let peer = spawn(&cfg, &run, 1, 2, port, &[]);
    // Under way, then only rank 1 hears the notice.
    loop {
        let line = peer
            .lines
            .recv_timeout(Duration::from_secs(60))
            .expect("rank 1 trains");
        if matches!(ProgressLine::parse(&line), Some(ProgressLine::RankStats { step, .. }) if step >= 20)
        {
            break;
        }
    }
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(peer.child.id() as i32, libc::SIGUSR1) };
    let (leader, peer) = (
        finish(leader, Duration::from_secs(60)),
        finish(peer, Duration::from_secs(60)),
    );
    assert_eq!(leader.code, Some(16), "{}", leader.stderr);
    assert_eq!(peer.code, Some(16), "{}", peer.stderr);
    let at = leader
        .lines
        .iter()
        .find_map(|l| match l {
            ProgressLine::Checkpoint {
                step, best: false, ..
            } => Some(*step),
            _ => None,
        })
        .expect("rank 0 checkpointed on the notice");
    assert!((20..400).contains(&at), "stopped after step {at}");
    assert!(
        leader.stderr.contains(&format!("stopped after step {at}")),
        "{}",
        leader.stderr
    );
    assert!(
        peer.stderr.contains(&format!("stopped after step {at}")),
        "{}",
        peer.stderr
    );

    let resumed = run_group(&cfg, &run, 2);
    assert!(resumed.iter().all(|r| r.code == Some(0)));
    assert_eq!(start_step(&resumed[0]), Some(at));
    assert_eq!(checksum(&resumed[0]), expected);
    assert_eq!(checksum(&resumed[1]), expected);
}

/// The injected notice (COHORT_FAULT_PREEMPT_AT_STEP) on one rank stops
/// both at exactly that step, with a checkpoint there.
#[test]
fn an_injected_notice_stops_the_gang_after_its_step() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "sae.toml", &config(32, 60, 10));
    let run = dir.path().join("run");
    let out = run_group_with(&cfg, &run, 2, &[("COHORT_FAULT_PREEMPT_AT_STEP", "1:23")]);
    assert!(out.iter().all(|r| r.code == Some(16)), "{}", out[0].stderr);
    let steps: Vec<i64> = out[0]
        .lines
        .iter()
        .filter_map(|l| match l {
            ProgressLine::Checkpoint { step, .. } => Some(*step),
            _ => None,
        })
        .collect();
    assert_eq!(steps, vec![10, 20, 24]);
}
