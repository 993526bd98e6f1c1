//! The pure builders on hand-made events and telemetry.

use super::gpu::{usage_by_rank, RankGpuUsage};
use super::metrics::metrics_jsonl;
use super::scaling::{scaling, ScalingRun};
use super::stats::percentile;
use super::summary::{summarize, TrainingFacts};
use crate::model::{EventPayload, JobState, StateChange, StoredEvent};
use crate::persistence::gpu_metrics::GpuBucket;
use chrono::{DateTime, TimeZone, Utc};
use cohort_spec::progress::{Progress, ProgressLine};
use std::collections::BTreeMap;

fn at(seconds: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_700_000_000 + seconds, 0).unwrap()
}

fn events(lines: Vec<EventPayload>) -> Vec<StoredEvent> {
    lines
        .into_iter()
        .enumerate()
        .map(|(i, payload)| StoredEvent {
            training_id: "trn-1".into(),
            seq: i as i64 + 1,
            attempt: 1,
            payload,
            time: at(i as i64),
        })
        .collect()
}

fn progress(step: i64, samples_per_sec: f64, step_time_ms: f64, loss: f64) -> EventPayload {
    EventPayload::Rank(ProgressLine::Progress(Progress {
        step,
        total_steps: 100,
        loss,
        mse: loss,
        samples_per_sec,
        step_time_ms,
        learning_rate: 0.001,
        grad_norm: 1.0,
        l0: 8.0,
        explained_variance: 0.9,
        ..Progress::default()
    }))
}

fn stats(rank: i64, compute_ms: f64, comm_ms: f64, memory_bytes: u64) -> EventPayload {
    EventPayload::Rank(ProgressLine::RankStats {
        rank,
        step: 10,
        step_time_ms: compute_ms + comm_ms + rank as f64,
        compute_ms,
        comm_ms,
        memory_bytes,
        // rank 1 waits 1 ms a step for its data, rank 0 never
        data_wait_ms: rank as f64,
        memory_kind: "host_rss".into(),
        host_memory_bytes: memory_bytes,
    })
}

fn facts() -> TrainingFacts {
    TrainingFacts {
        world_size: 2,
        attempts: 1,
        wall_time_s: 12.5,
        program: false,
    }
}

#[test]
fn nearest_rank_percentiles() {
    let values: Vec<f64> = (1..=100).rev().map(f64::from).collect();
    assert_eq!(percentile(&values, 50.0), Some(50.0));
    assert_eq!(percentile(&values, 90.0), Some(90.0));
    assert_eq!(percentile(&values, 99.0), Some(99.0));
    assert_eq!(percentile(&[7.0, 3.0, 5.0], 50.0), Some(5.0));
    assert_eq!(percentile(&[7.0, 3.0, 5.0], 99.0), Some(7.0));
    assert_eq!(percentile(&[4.0], 1.0), Some(4.0));
    assert_eq!(percentile(&[], 50.0), None);
}

#[test]
fn summary_of_progress_windows_and_rank_stats() {
    let mut lines = vec![
        EventPayload::StateChange(StateChange {
            from: None,
            to: JobState::Queued,
            reason: "created".into(),
        }),
        EventPayload::Rank(ProgressLine::Started {
            world_size: 2,
            device: "cpu".into(),
            total_steps: 100,
            start_step: 0,
            global_batch: 64,
            parameters: 1000,
        }),
    ];
    // Ten windows: step times 10..=100 ms, throughput 100..=1000 samples/s.
    for i in 1..=10 {
        lines.push(progress(
            i * 10,
            100.0 * i as f64,
            10.0 * i as f64,
            1.0 / i as f64,
        ));
        lines.push(stats(0, 30.0, 10.0, 1000 * i as u64));
        lines.push(stats(1, 20.0, 20.0, 500));
    }
    lines.push(EventPayload::Rank(ProgressLine::Finished {
        step: 100,
        loss: 0.09,
        param_checksum: "abc".into(),
        wall_time_s: 11.0,
        mean_samples_per_sec: 550.0,
    }));
    let s = summarize(&facts(), &events(lines), BTreeMap::new());
    assert_eq!(s.steps, 100);
    assert_eq!(s.total_steps, 100);
    assert_eq!(s.final_loss, Some(0.09));
    assert_eq!(s.training_time_s, Some(11.0));
    assert_eq!(s.wall_time_s, 12.5);
    assert_eq!(s.progress_windows, 10);
    // Windows of 10 steps at 10i ms a step and 100i samples/s: weighted by
    // time, sum(100i x 100i) / sum(100i) = 100 x 385 / 55.
    assert_eq!(s.mean_samples_per_sec, Some(700.0));
    assert_eq!(s.best_samples_per_sec, Some(1000.0));
    assert_eq!(s.step_time_p50_ms, Some(50.0));
    assert_eq!(s.step_time_p90_ms, Some(90.0));
    assert_eq!(s.step_time_p99_ms, Some(100.0));
    assert_eq!(s.ranks.len(), 2);
    let (r0, r1) = (&s.ranks[0], &s.ranks[1]);
    assert_eq!((r0.rank, r0.stats_windows), (0, 10));
    assert_eq!(r0.compute_share, Some(0.75));
    assert_eq!(r0.comm_share, Some(0.25));
    assert_eq!(r0.peak_memory_bytes, 10_000);
    assert_eq!(r0.mean_step_time_ms, Some(40.0));
    assert_eq!(r0.mean_data_wait_ms, Some(0.0));
    assert_eq!(r1.mean_data_wait_ms, Some(1.0));
    assert_eq!(r1.compute_share, Some(0.5));
    assert_eq!(r1.peak_memory_bytes, 500);
    assert_eq!(r0.gpu, RankGpuUsage::default());
}

fn started(start_step: i64) -> EventPayload {
    EventPayload::Rank(ProgressLine::Started {
        world_size: 1,
        device: "cpu".into(),
        total_steps: 40,
        start_step,
        global_batch: 32,
        parameters: 1000,
    })
}

#[test]
fn warmup_windows_are_left_out_of_the_mean_only() {
    let lines = vec![
        started(0),
        progress(1, 1.0, 500.0, 3.0),
        progress(11, 100.0, 10.0, 2.0),
        // A restart resumes from step 11: its first step warms up again.
        started(11),
        progress(12, 2.0, 400.0, 2.0),
        progress(22, 300.0, 10.0, 1.0),
    ];
    let s = summarize(&facts(), &events(lines), BTreeMap::new());
    // 10 steps x 10 ms at 100/s, then 10 x 10 ms at 300/s.
    assert_eq!(s.mean_samples_per_sec, Some(200.0));
    assert_eq!(s.best_samples_per_sec, Some(300.0));
    assert_eq!(s.progress_windows, 4);
    assert_eq!(s.step_time_p99_ms, Some(500.0), "percentiles keep warm-up");
    // Only warm-up windows: they are all there is.
    let s = summarize(
        &facts(),
        &events(vec![started(0), progress(1, 4.0, 250.0, 3.0)]),
        BTreeMap::new(),
    );
    assert_eq!(s.mean_samples_per_sec, Some(4.0));
}

#[test]
fn unfinished_training_uses_the_newest_window() {
    let lines = vec![progress(5, 10.0, 3.0, 2.0), progress(10, 30.0, 1.0, 1.5)];
    let s = summarize(&facts(), &events(lines), BTreeMap::new());
    assert_eq!(s.steps, 10);
    assert_eq!(s.final_loss, Some(1.5));
    assert_eq!(s.training_time_s, None);
    // 5 steps x 3 ms at 10/s, then 5 steps x 1 ms at 30/s: 300 / 20.
    assert_eq!(s.mean_samples_per_sec, Some(15.0));
    assert!(s.ranks.is_empty());
}

#[test]
fn no_rank_activity_means_no_share() {
    let s = summarize(
        &facts(),
        &events(vec![stats(0, 0.0, 0.0, 0)]),
        BTreeMap::new(),
    );
    assert_eq!(s.ranks[0].compute_share, None);
    assert_eq!(s.ranks[0].comm_share, None);
    assert_eq!(s.mean_samples_per_sec, None);
    assert_eq!(s.step_time_p50_ms, None);
}

fn bucket(uuid: &str, rank: Option<i32>, samples: i64, util: &[f64], mem_mean: f64) -> GpuBucket {
    GpuBucket {
        gpu_uuid: uuid.into(),
        bucket: 0,
        gpu_index: 0,
        agent_id: "a".into(),
        agent_name: "a".into(),
        training_id: Some("trn-1".into()),
        rank,
        samples,
        util_sum: (!util.is_empty()).then(|| util.iter().sum()),
        util_n: util.len() as i64,
        util_mem_sum: None,
        util_mem_n: 0,
        mem_used_sum: mem_mean * samples as f64,
        mem_total_max: 8_000,
        temp_max: None,
        power_sum: None,
        power_n: 0,
        ecc_corrected_max: None,
        ecc_uncorrected_max: None,
        simulated: 1,
    }
}

#[test]
fn gpu_usage_per_rank_weights_by_samples() {
    let buckets = vec![
        bucket("g0", Some(0), 2, &[50.0, 70.0], 1000.0),
        bucket("g0", Some(0), 1, &[90.0], 4000.0),
        bucket("g1", Some(1), 1, &[], 2000.0),
        bucket("g9", None, 5, &[100.0], 9000.0),
    ];
    let usage = usage_by_rank(&buckets);
    assert_eq!(usage.len(), 2, "the unranked GPU is left out");
    let r0 = &usage[&0];
    assert_eq!(r0.gpu_uuids, vec!["g0".to_string()]);
    assert_eq!(r0.samples, 3);
    assert_eq!(r0.utilization_mean_percent, Some(70.0));
    assert_eq!(r0.utilization_max_percent, Some(90.0));
    assert_eq!(r0.memory_used_mean_bytes, 2000);
    assert_eq!(r0.memory_used_max_bytes, 4000);
    assert_eq!(r0.memory_total_bytes, 8000);
    assert_eq!(usage[&1].utilization_mean_percent, None);

    let s = summarize(&facts(), &[], usage);
    assert_eq!(s.ranks.len(), 2, "ranks seen only in telemetry are listed");
    assert_eq!(s.ranks[1].gpu.memory_used_max_bytes, 2000);
}

fn run(id: &str, world_size: i32, samples_per_sec: Option<f64>, created: i64) -> ScalingRun {
    ScalingRun {
        training_id: id.into(),
        world_size,
        samples_per_sec,
        create_time: at(created),
    }
}

#[test]
fn speedup_and_efficiency_against_the_newest_one_rank_run() {
    let runs = vec![
        run("four", 4, Some(300.0), 5),
        run("one-old", 1, Some(50.0), 1),
        run("one", 1, Some(100.0), 2),
        run("two", 2, Some(180.0), 3),
    ];
    let s = scaling("two", &runs);
    assert_eq!(s.baseline_training_id.as_deref(), Some("one"));
    assert!(s.note.is_empty());
    let ids: Vec<&str> = s.rows.iter().map(|r| r.training_id.as_str()).collect();
    assert_eq!(ids, ["one", "one-old", "two", "four"]);
    let two = &s.rows[2];
    assert!(two.current);
    assert_eq!(two.speedup, Some(1.8));
    assert_eq!(two.efficiency, Some(0.9));
    assert_eq!(s.rows[3].speedup, Some(3.0));
    assert_eq!(s.rows[3].efficiency, Some(0.75));
    assert_eq!(s.rows[0].speedup, Some(1.0));
    assert_eq!(s.rows[0].efficiency, Some(1.0));
    assert!(s.rows.iter().filter(|r| r.current).count() == 1);
}

#[test]
fn without_a_one_rank_run_there_is_no_speedup() {
    let runs = vec![
        run("two", 2, Some(180.0), 3),
        run("four", 4, Some(300.0), 5),
        run("one-silent", 1, None, 6),
    ];
    let s = scaling("four", &runs);
    assert_eq!(s.baseline_training_id, None);
    assert!(s.note.contains("no succeeded 1-rank run"), "{}", s.note);
    assert!(s
        .rows
        .iter()
        .all(|r| r.speedup.is_none() && r.efficiency.is_none()));
    assert_eq!(s.rows.len(), 3);
}

#[test]
fn metrics_lines_carry_what_the_rank_wrote_plus_where_it_was_stored() {
    let lines = vec![
        EventPayload::StateChange(StateChange {
            from: None,
            to: JobState::Queued,
            reason: "created".into(),
        }),
        progress(5, 10.0, 3.0, 2.0),
        stats(1, 2.0, 1.0, 7),
    ];
    let text = metrics_jsonl(&events(lines));
    let parsed: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(parsed.len(), 2, "state changes are not metrics: {text}");
    assert!(text.ends_with('\n'));
    assert_eq!(parsed[0]["event"], "progress");
    assert_eq!(parsed[0]["step"], 5);
    assert_eq!(parsed[0]["samples_per_sec"], 10.0);
    assert_eq!(parsed[0]["seq"], 2);
    assert_eq!(parsed[0]["attempt"], 1);
    assert_eq!(parsed[0]["time"], "2023-11-14T22:13:21.000Z");
    assert_eq!(parsed[1]["event"], "rank_stats");
    assert_eq!(parsed[1]["memory_bytes"], 7);
    // Without the stored fields, each line is exactly the rank's line.
    let mut back = parsed[1].clone();
    for key in ["seq", "attempt", "time"] {
        back.as_object_mut().unwrap().remove(key);
    }
    assert_eq!(
        ProgressLine::parse(&back.to_string()),
        Some(ProgressLine::RankStats {
            rank: 1,
            step: 10,
            step_time_ms: 4.0,
            compute_ms: 2.0,
            comm_ms: 1.0,
            memory_bytes: 7,
            data_wait_ms: 1.0,
            memory_kind: "host_rss".into(),
            host_memory_bytes: 7,
        })
    );
}

#[test]
fn a_program_that_reported_nothing_has_unknown_steps() {
    let program = TrainingFacts {
        program: true,
        ..facts()
    };
    let silent = summarize(&program, &[], BTreeMap::new());
    assert!(silent.steps_unknown);
    assert_eq!((silent.steps, silent.total_steps), (0, 0));
    // One progress line is enough to know; the SAE's 0 steps are known.
    let spoke = summarize(
        &program,
        &events(vec![progress(3, 10.0, 5.0, 1.0)]),
        BTreeMap::new(),
    );
    assert!(!spoke.steps_unknown);
    assert!(!summarize(&facts(), &[], BTreeMap::new()).steps_unknown);
}
