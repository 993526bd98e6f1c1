//! An elastic program (`[program] elastic = true`) with real processes: the
//! torch DDP example, asked for 2..4 GPUs with a global batch of 64, starts
//! at 2 while another training holds the rest; when that one ends it gets
//! the preemption notice (SIGTERM), checkpoints the step it is at, and is
//! started again at 4 ranks from that checkpoint with torchrun's variables
//! for the new size, `COHORT_MIN_WORLD_SIZE`/`COHORT_MAX_WORLD_SIZE` and
//! `COHORT_GLOBAL_BATCH`; no restart is spent and its loss at every logged
//! step is a fixed 2-rank run's. A program that did not opt in keeps the
//! size it started at.

use cohort_integration_tests::program::{program_options, torch_ddp};
use cohort_integration_tests::watch::watch_to_end;
use cohort_integration_tests::Backend;
use cohort_integration_tests::Cluster;
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use cohort_proto::v1::training_event::Event;
use std::collections::BTreeMap;
use std::time::Duration;

const JOB_TIMEOUT: Duration = Duration::from_secs(240);

/// The torch DDP example for `steps` steps of at least `sleep` seconds,
/// logging every 5, on `gpus`; `elastic` opts it in.
fn ddp(steps: u32, sleep: &str, gpus: v1::GpuRequest, elastic: bool) -> v1::CreateTrainingRequest {
    let steps = steps.to_string();
    let args = [
        "--steps",
        steps.as_str(),
        "--step-sleep",
        sleep,
        "--checkpoint-every",
        "1000",
        "--log-every",
        "5",
    ];
    let mut request = torch_ddp(&args, 3);
    let config = request.config.as_mut().expect("config");
    let program = config.program.as_mut().expect("program");
    program.elastic = elastic;
    program.global_batch = Some(64);
    request.gpus = Some(gpus);
    request.max_restarts = Some(0);
    request
}

fn count(n: i32) -> v1::GpuRequest {
    v1::GpuRequest {
        selection: Some(v1::gpu_request::Selection::Count(n)),
        ..Default::default()
    }
}

fn range(min: i32, max: i32) -> v1::GpuRequest {
    v1::GpuRequest {
        min_count: Some(min),
        max_count: Some(max),
        ..Default::default()
    }
}

/// Step -> loss of a program's progress lines.
fn losses(events: &[v1::TrainingEvent]) -> BTreeMap<i64, f64> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Some(Event::ProgramProgress(p)) => Some((p.step, p.loss?)),
            _ => None,
        })
        .collect()
}

/// The size of each start: "all N ranks started" (a program sends no
/// `started` event of its own).
fn started_sizes(events: &[v1::TrainingEvent]) -> Vec<i32> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Some(Event::StateChange(c)) if c.to() == State::Running => c
                .reason
                .strip_prefix("all ")?
                .strip_suffix(" ranks started")?
                .parse()
                .ok(),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elastic_program_grows_from_its_notice_checkpoint_with_the_same_optimisation() {
    let mut options = program_options(Backend::Sqlite, 2, &[]);
    options.coordinator_args = vec!["--elastic-cooldown".into(), "1s".into()];
    let cluster = Cluster::start(options).await;
    let mut client = cluster.training().await;

    // The fixed run the elastic one is compared with.
    let fixed = cluster.create(ddp(300, "0", count(2), false)).await;
    let fixed = watch_to_end(&mut client, &fixed, JOB_TIMEOUT).await;
    assert_eq!(fixed.final_state(), Some(State::Succeeded));

    // Two of the four GPUs held for ~10 s; the elastic program asks 2..4.
    let blocker = cluster.create(ddp(200, "0.05", count(2), false)).await;
    cluster
        .wait_state(&blocker, State::Running, JOB_TIMEOUT)
        .await;
    let elastic = cluster.create(ddp(300, "0.1", range(2, 4), true)).await;
    let run = watch_to_end(&mut client, &elastic, JOB_TIMEOUT).await;
    if run.final_state() != Some(State::Succeeded) {
        cluster.fail(&format!("elastic program: {:#?}", run.events));
    }
    assert_eq!(started_sizes(&run.events), [2, 4], "{:#?}", run.events);
    let resized = run.resizes();
    assert_eq!(resized.len(), 1, "{:#?}", run.events);
    let r = resized[0];
    assert_eq!(
        (r.from_world_size, r.to_world_size, r.reason.as_str()),
        (2, 4, "grow")
    );
    let at = r
        .step
        .expect("it resumed from the checkpoint of its notice");
    assert!((1..300).contains(&at), "{at}");
    let t = cluster.get_training(&elastic).await;
    assert_eq!(
        (
            t.world_size,
            t.resize_count,
            t.restart_count,
            t.preemption_count
        ),
        (4, 1, 0, 0)
    );

    // The second start: 4 ranks, told the range and the global batch, from
    // the notice's checkpoint.
    let log = cluster
        .cli_ok(&["logs", &elastic, "--attempt", "2", "--rank", "0"])
        .await;
    assert!(
        log.contains("resuming from") && log.contains(&format!("at step {at}")),
        "{log}"
    );
    assert!(
        log.contains("rank 0 of 4") && log.contains("global batch 64 (16 per rank), sizes 2..4"),
        "{log}"
    );

    // The same global batch at every step: the 2-rank start bit for bit as
    // the fixed run, the 4-rank one within f32 reduction-order noise.
    let (fixed, grown) = (losses(&fixed.events), losses(&run.events));
    assert!(fixed.len() >= 60, "{}", fixed.len());
    let (mut after, mut worst) = (0, 0f64);
    for (step, loss) in &fixed {
        let Some(other) = grown.get(step) else {
            continue;
        };
        let rel = (loss - other).abs() / loss.abs().max(1e-12);
        let within = if *step <= at { 0.0 } else { 1e-4 };
        assert!(
            rel <= within,
            "step {step}: {loss} vs {other} ({rel:e} > {within:e})"
        );
        after += usize::from(*step > at);
        worst = worst.max(rel);
    }
    eprintln!("elastic program: {after} logged steps after the resize at {at}, worst relative difference {worst:e}");
    assert!(after >= 5, "compared {after} steps after the resize");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_did_not_opt_in_keeps_its_first_size() {
    let mut options = program_options(Backend::Sqlite, 2, &[]);
    options.coordinator_args = vec!["--elastic-cooldown".into(), "1s".into()];
    let cluster = Cluster::start(options).await;
    let mut client = cluster.training().await;
    let blocker = cluster.create(ddp(100, "0.05", count(2), false)).await;
    cluster
        .wait_state(&blocker, State::Running, JOB_TIMEOUT)
        .await;
    let fixed = cluster.create(ddp(150, "0.1", range(2, 4), false)).await;
    let run = watch_to_end(&mut client, &fixed, JOB_TIMEOUT).await;
    assert_eq!(run.final_state(), Some(State::Succeeded));
    assert_eq!(started_sizes(&run.events), [2], "{:#?}", run.events);
    let t = cluster.get_training(&fixed).await;
    assert_eq!((t.world_size, t.resize_count), (2, 0));
    let log = cluster
        .cli_ok(&["logs", &fixed, "--attempt", "1", "--rank", "0"])
        .await;
    // A size it never leaves: both ends of its range are the one it runs at.
    assert!(log.contains("sizes 2..2"), "{log}");
}
