//! The simulation on small traces whose outcome can be worked out by hand.

use super::*;
use crate::scenario::PolicyRun;

fn job(id: &str, submit: f64, gpus: u32, hours: f64, class: &str) -> TraceJob {
    TraceJob {
        id: id.into(),
        submit_s: submit,
        team: "a".into(),
        gpus,
        duration_s: hours * 3600.0,
        class: class.into(),
        checkpoint_every_s: 1800.0,
        expected_duration_s: Some(hours * 3600.0),
        saves_on_notice: true,
        min_gpus: None,
    }
}

fn simulate(trace: &[TraceJob], policy: &str) -> Run {
    let run = PolicyRun::parse(policy, Duration::from_secs(600)).unwrap();
    let settings = Settings::default();
    let fleet = crate::fleet::FleetSpec::parse("1x8").unwrap();
    Engine::new(
        trace,
        fleet.view(),
        Shares::default(),
        HashMap::new(),
        &run,
        &settings,
    )
    .run()
}

#[test]
fn an_urgent_job_preempts_under_sharing_and_waits_under_fifo() {
    let trace = [
        job("long", 0.0, 8, 10.0, "normal"),
        job("urgent", 3600.0, 4, 1.0, "urgent"),
    ];
    let fifo = simulate(&trace, "fifo-backfill");
    let urgent = &fifo.jobs[1];
    assert_eq!(urgent.first_start, Some(36_000.0), "after the long one");
    let sharing = simulate(&trace, "sharing");
    let (long, urgent) = (&sharing.jobs[0], &sharing.jobs[1]);
    // Its victim checkpoints in 20 s, then it runs.
    assert_eq!(urgent.first_start, Some(3620.0));
    assert_eq!(long.preemptions, 1);
    // The long one lost only its 20 s stop; it ends 1 h (the urgent
    // one) and 20 s later than alone.
    assert!(
        (long.lost_gpu_s - 20.0 * 8.0).abs() < 1e-6,
        "{}",
        long.lost_gpu_s
    );
    assert_eq!(long.end, Some(36_000.0 + 3600.0 + 20.0));
    // Estimates: the urgent one's, made at the first tick (1 h), was
    // its actual start.
    let (made, estimate) = urgent.estimate.clone().unwrap();
    assert_eq!(made, 3600.0);
    assert_eq!(estimate, Ok(3620.0));
}

#[test]
fn a_waiting_job_keeps_a_later_estimate_every_ten_minutes_until_it_starts() {
    // "waits" waits 5 h behind "long"; newcomers every 5 minutes make
    // forecasts, each of which sees it still waiting.
    let mut trace = vec![
        job("long", 0.0, 8, 5.0, "normal"),
        job("waits", 60.0, 8, 1.0, "normal"),
    ];
    for k in 0..80 {
        trace.push(job(
            &format!("n{k}"),
            300.0 * f64::from(k + 1),
            8,
            1.0,
            "low",
        ));
    }
    let run = simulate(&trace, "fifo-backfill");
    let waits = &run.jobs[1];
    assert_eq!(waits.first_start, Some(18_000.0));
    let (made, estimate) = waits.estimate.clone().unwrap();
    assert_eq!((made, estimate), (60.0, Ok(18_000.0)));
    assert!(!waits.later.is_empty());
    let mut last = made;
    for &(at, estimate) in &waits.later {
        assert!(at - last >= RESAMPLE_S, "{at} after {last}");
        assert!(at < 18_000.0, "only while it waits: {at}");
        assert_eq!(estimate, 18_000.0, "nobody overtakes it");
        last = at;
    }
    // Every 10 minutes from its first estimate to its start: 29 looks.
    assert_eq!(waits.later.len(), 29);
}

#[test]
fn a_job_that_does_not_save_on_notice_loses_its_work_since_its_checkpoint() {
    let mut long = job("long", 0.0, 8, 10.0, "normal");
    long.saves_on_notice = false;
    // Noticed 50 minutes in: its last checkpoint was at 30 minutes;
    // it runs on through its 60 s grace and is killed.
    let trace = [long, job("urgent", 3000.0, 8, 1.0, "urgent")];
    let run = simulate(&trace, "sharing");
    let long = &run.jobs[0];
    assert_eq!(run.jobs[1].first_start, Some(3060.0));
    let lost = (3060.0 - 1800.0) * 8.0;
    assert!((long.lost_gpu_s - lost).abs() < 1e-6, "{}", long.lost_gpu_s);
    assert_eq!(long.end, Some(3060.0 + 3600.0 + (36_000.0 - 1800.0)));
}

#[test]
fn an_elastic_job_shrinks_for_urgent_work_and_grows_back() {
    let mut long = job("long", 0.0, 8, 10.0, "normal");
    long.min_gpus = Some(4);
    let trace = [long, job("urgent", 3600.0, 4, 1.0, "urgent")];
    // Fixed requests: the long one is preempted whole and waits out
    // the urgent hour.
    let fixed = simulate(&trace, "sharing");
    assert_eq!(fixed.jobs[0].preemptions, 1);
    assert_eq!(fixed.jobs[0].end, Some(7220.0 + 36_000.0 - 3600.0));
    // Elastic: it gives up 4 GPUs instead (20 s to checkpoint), runs
    // the urgent hour at half pace, and grows back when it ends.
    let elastic = simulate(&trace, "sharing:elastic");
    let (long, urgent) = (&elastic.jobs[0], &elastic.jobs[1]);
    assert_eq!(urgent.first_start, Some(3620.0));
    assert_eq!((long.preemptions, long.resizes, long.size), (0, 2, 8));
    // 3600 s of work at 8, 3600 s at 4 (1800 s of work at 8), a 20 s
    // stop, then the remaining 30 600 s at 8.
    assert_eq!(long.end, Some(7240.0 + 36_000.0 - 3600.0 - 1800.0));
    assert!(
        (long.resize_gpu_s - (20.0 * 8.0 + 20.0 * 4.0)).abs() < 1e-6,
        "{}",
        long.resize_gpu_s
    );
    assert_eq!(long.lost_gpu_s, 0.0);
    // What it held: 8 GPUs but for the urgent hour.
    let held = 3620.0 * 8.0 + 3620.0 * 4.0 + (long.end.unwrap() - 7240.0) * 8.0;
    assert!((long.held_gpu_s - held).abs() < 1e-6, "{}", long.held_gpu_s);
}
