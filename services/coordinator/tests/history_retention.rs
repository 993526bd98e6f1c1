//! GPU metrics retention on real SQLite and PostgreSQL, driven by a fake
//! clock: samples older than the raw window become exact 1-minute rollups
//! (min/mean/max/count), the raw rows vanish, late samples merge into their
//! minute, rollups older than their window vanish, and a history read gives
//! the same answer before and after the move.

mod common;

use chrono::{DateTime, Utc};
use cohort_coordinator::history::{FakeClock, HistorySettings, Retention};
use cohort_coordinator::persistence::gpu_metrics::{
    BucketWindow, GpuBucket, MetricsSelection, NewGpuMetric, RetentionPass,
};
use cohort_coordinator::persistence::Persistence;
use std::sync::Arc;
use std::time::Duration;

const MINUTE: i64 = 60_000;
/// 2026-11-22T00:00:00Z, a whole minute.
const T0: i64 = 1_795_305_600_000;

fn sample(uuid: &str, ms: i64, util: Option<f64>, mem: i64, temp: f64, power: f64) -> NewGpuMetric {
    let time = DateTime::from_timestamp_millis(ms).unwrap();
    NewGpuMetric {
        gpu_uuid: uuid.into(),
        gpu_index: 1,
        agent_id: "agt-1".into(),
        agent_name: "host-a".into(),
        training_id: Some("trn-1".into()),
        rank: Some(2),
        sample_time: time.naive_utc(),
        sample_ms: ms,
        utilization_gpu_percent: util,
        utilization_memory_percent: Some(10.0),
        memory_used_bytes: mem,
        memory_total_bytes: 1_000,
        temperature_celsius: Some(temp),
        power_draw_watts: Some(power),
        power_limit_watts: Some(300.0),
        sm_clock_mhz: Some(1_500),
        memory_clock_mhz: Some(5_000),
        ecc_errors_corrected: Some(0),
        ecc_errors_uncorrected: None,
        throttle_reasons: String::new(),
        simulated: true,
    }
}

fn settings(raw: Duration, rollup: Duration) -> HistorySettings {
    HistorySettings {
        raw_retention: raw,
        rollup_retention: rollup,
        ..Default::default()
    }
}

fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap()
}

/// One merged bucket per GPU over `[from, to)` with one bucket of `step`.
async fn read(db: &Persistence, uuid: &str, from: i64, to: i64) -> GpuBucket {
    let parts = db
        .gpu_metric_buckets(
            MetricsSelection {
                gpu_uuids: vec![uuid.into()],
                ..Default::default()
            },
            BucketWindow {
                start_ms: from,
                step_ms: to - from,
                first: 0,
                end: 1,
                until_ms: to,
            },
        )
        .await
        .unwrap();
    let mut it = parts.into_iter();
    let mut merged = it.next().expect("a bucket");
    for p in it {
        merged.merge(&p);
    }
    merged
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_samples_become_exact_rollups_and_expire() {
    for t in common::databases().await {
        let db = &t.db;
        let gpu = "GPU-ret";
        // Minute 0: three samples; minute 1: two (one without utilization);
        // minute 2: one, still inside the raw window at the first pass.
        let rows = vec![
            sample(gpu, T0 + 1_000, Some(10.0), 100, 50.0, 100.0),
            sample(gpu, T0 + 20_000, Some(40.0), 400, 70.0, 200.0),
            sample(gpu, T0 + 59_999, Some(70.0), 700, 60.0, 300.0),
            sample(gpu, T0 + MINUTE, Some(20.0), 200, 40.0, 150.0),
            sample(gpu, T0 + MINUTE + 30_000, None, 600, 45.0, 250.0),
            sample(gpu, T0 + 2 * MINUTE + 5_000, Some(90.0), 900, 80.0, 400.0),
        ];
        assert_eq!(db.insert_gpu_metrics(rows).await.unwrap(), 6, "{}", t.name);
        let before = read(db, gpu, T0, T0 + 2 * MINUTE).await;

        // Raw window 1 h; now = T0 + 1 h + 2 min + 30 s: the raw cutoff is
        // T0 + 2 min + 30 s, rounded down to T0 + 2 min, so minutes 0 and 1
        // (complete) move and minute 2 stays raw.
        let clock = Arc::new(FakeClock::new(at(T0 + 3_600_000 + 2 * MINUTE + 30_000)));
        let retention = Retention::new(
            db.clone(),
            clock.clone(),
            settings(Duration::from_secs(3600), Duration::from_secs(2 * 3600)),
        );
        let pass = retention.run_once().await.unwrap();
        assert_eq!(
            pass,
            RetentionPass {
                raw_rolled_up: 5,
                rollups_written: 2,
                rollups_expired: 0
            },
            "{}",
            t.name
        );
        let raw = common::raw_gpu_metrics(db, gpu).await;
        assert_eq!(raw.len(), 1, "{}", t.name);
        assert_eq!(raw[0].sample_ms, T0 + 2 * MINUTE + 5_000);

        let rollups = common::gpu_metric_rollups(db, gpu).await;
        assert_eq!(rollups.len(), 2, "{}", t.name);
        let m0 = &rollups[0];
        assert_eq!((m0.bucket_ms, m0.sample_count), (T0, 3));
        assert_eq!((m0.training_id.as_str(), m0.rank), ("trn-1", Some(2)));
        assert_eq!(
            (m0.agent_id.as_str(), m0.agent_name.as_str()),
            ("agt-1", "host-a")
        );
        assert_eq!(
            (
                m0.utilization_gpu_min,
                m0.utilization_gpu_mean,
                m0.utilization_gpu_max
            ),
            (Some(10.0), Some(40.0), Some(70.0))
        );
        assert_eq!(
            (m0.memory_used_min, m0.memory_used_mean, m0.memory_used_max),
            (100, 400.0, 700)
        );
        assert_eq!(
            (m0.temperature_min, m0.temperature_mean, m0.temperature_max),
            (Some(50.0), Some(60.0), Some(70.0))
        );
        assert_eq!(
            (m0.power_min, m0.power_mean, m0.power_max),
            (Some(100.0), Some(200.0), Some(300.0))
        );
        assert_eq!(m0.memory_total_bytes, 1_000);
        let m1 = &rollups[1];
        assert_eq!((m1.bucket_ms, m1.sample_count), (T0 + MINUTE, 2));
        // The mean of the samples that have a utilization.
        assert_eq!(
            (
                m1.utilization_gpu_min,
                m1.utilization_gpu_mean,
                m1.utilization_gpu_max
            ),
            (Some(20.0), Some(20.0), Some(20.0))
        );
        assert_eq!(m1.memory_used_mean, 400.0);

        // A read over the two minutes sums the same, now from rollups.
        let after = read(db, gpu, T0, T0 + 2 * MINUTE).await;
        assert_eq!(after.samples, before.samples, "{}", t.name);
        assert_eq!(after.utilization_gpu_mean(), before.utilization_gpu_mean());
        assert_eq!(after.memory_used_mean(), before.memory_used_mean());
        assert_eq!(after.power_mean(), before.power_mean());
        assert_eq!(after.temp_max, before.temp_max);
        assert_eq!(after.training_id.as_deref(), Some("trn-1"));

        // Idempotent: nothing left to move.
        assert_eq!(
            retention.run_once().await.unwrap(),
            RetentionPass::default(),
            "{}",
            t.name
        );

        // A late sample of minute 0 merges into its rollup (weighted mean).
        db.insert_gpu_metrics(vec![sample(gpu, T0 + 30_000, Some(0.0), 0, 90.0, 0.0)])
            .await
            .unwrap();
        let pass = retention.run_once().await.unwrap();
        assert_eq!((pass.raw_rolled_up, pass.rollups_written), (1, 1));
        let m0 = common::gpu_metric_rollups(db, gpu).await[0].clone();
        assert_eq!(m0.sample_count, 4);
        assert_eq!(
            (
                m0.utilization_gpu_min,
                m0.utilization_gpu_mean,
                m0.utilization_gpu_max
            ),
            (Some(0.0), Some(30.0), Some(70.0))
        );
        assert_eq!((m0.memory_used_min, m0.memory_used_mean), (0, 300.0));
        assert_eq!(m0.temperature_max, Some(90.0));

        // 59 minutes on (now T0 + 2h1m30s): minute 2 moves too, and minutes
        // 0 and 1 start before the rollup cutoff (now - 2h = T0 + 1m30s):
        // they expire while minute 2 stays.
        clock.advance(chrono::Duration::minutes(59));
        let pass = retention.run_once().await.unwrap();
        assert_eq!(
            pass,
            RetentionPass {
                raw_rolled_up: 1,
                rollups_written: 1,
                rollups_expired: 2
            },
            "{}",
            t.name
        );
        let rollups = common::gpu_metric_rollups(db, gpu).await;
        assert_eq!(rollups.len(), 1);
        assert_eq!(rollups[0].bucket_ms, T0 + 2 * MINUTE);
        assert!(common::raw_gpu_metrics(db, gpu).await.is_empty());

        // Past every window: nothing is left.
        clock.advance(chrono::Duration::days(1));
        assert_eq!(retention.run_once().await.unwrap().rollups_expired, 1);
        assert!(common::gpu_metric_rollups(db, gpu).await.is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_changing_holder_within_a_minute_keeps_one_rollup_per_holder() {
    for t in common::databases().await {
        let db = &t.db;
        let gpu = "GPU-hold";
        let mut free = sample(gpu, T0 + 1_000, Some(0.0), 0, 30.0, 50.0);
        free.training_id = None;
        free.rank = None;
        let held = sample(gpu, T0 + 40_000, Some(100.0), 800, 70.0, 250.0);
        db.insert_gpu_metrics(vec![free, held]).await.unwrap();
        let clock = Arc::new(FakeClock::new(at(T0 + 3_600_000 + MINUTE)));
        let retention = Retention::new(
            db.clone(),
            clock,
            settings(Duration::from_secs(3600), Duration::from_secs(7200)),
        );
        assert_eq!(
            retention.run_once().await.unwrap().rollups_written,
            2,
            "{}",
            t.name
        );
        let rollups = common::gpu_metric_rollups(db, gpu).await;
        let holders: Vec<(&str, Option<i32>, i64)> = rollups
            .iter()
            .map(|r| (r.training_id.as_str(), r.rank, r.sample_count))
            .collect();
        assert_eq!(
            holders,
            vec![("", None, 1), ("trn-1", Some(2), 1)],
            "{}",
            t.name
        );
        // Filtered by training, only the held part is read back.
        let parts = db
            .gpu_metric_buckets(
                MetricsSelection {
                    training_id: "trn-1".into(),
                    ..Default::default()
                },
                BucketWindow {
                    start_ms: T0,
                    step_ms: MINUTE,
                    first: 0,
                    end: 1,
                    until_ms: T0 + MINUTE,
                },
            )
            .await
            .unwrap();
        assert_eq!(parts.len(), 1, "{}", t.name);
        assert_eq!(parts[0].utilization_gpu_mean(), Some(100.0));
    }
}
