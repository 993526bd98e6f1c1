//! Sweeps (SweepService, `cohort sweep`): the coordinator's searcher starts
//! real trainings of a base config over a search space, never more at once
//! than `max_concurrent`, names the best, goes on after a coordinator
//! restart, and a cancel stops every trial; bad requests are refused
//! naming the field, writing nothing.

use cohort_integration_tests::status::expect_error;
use cohort_integration_tests::watch::watch_to_end;
use cohort_integration_tests::{Backend, Cluster, ClusterOptions, SaeJob};
use cohort_proto::error::{bad_fields, Reason};
use cohort_proto::v1;
use cohort_proto::v1::sweep_service_client::SweepServiceClient;
use cohort_proto::v1::training_event::Event;
use cohort_spec::sweep::Space;
use cohort_testkit::eventually;
use serde_json::Value;
use std::time::Duration;
use tonic::Code;

const SPACE: &str = "\"optim.learning_rate\" = { log_uniform = [1e-3, 1e-2] }\n\"model.d_sae\" = { choice = [64, 128] }\n";

async fn sweep_json(cluster: &Cluster, id: &str) -> Value {
    let out = cluster.cli_ok(&["-o", "json", "sweep", "get", id]).await;
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("sweep get -o json: {e}: {out}"))
}

/// `cohort sweep create` of `job` over `space` with `extra` flags,
/// minimising the loss; the id.
async fn create(cluster: &Cluster, job: &SaeJob, space: &str, extra: &[&str]) -> String {
    create_judged(cluster, job, space, "loss", extra).await
}

/// `cohort sweep create` judged on `objective`.
async fn create_judged(
    cluster: &Cluster,
    job: &SaeJob,
    space: &str,
    objective: &str,
    extra: &[&str],
) -> String {
    let base = job.write(cluster.root(), "base.toml");
    let path = cluster.root().join("space.toml");
    std::fs::write(&path, space).unwrap();
    let args = create_args(
        base.to_str().unwrap(),
        path.to_str().unwrap(),
        objective,
        extra,
    );
    cluster.cli_ok(&args).await.trim().to_string()
}

/// Trial `n`'s training, once the searcher started it.
async fn trial(cluster: &Cluster, id: &str, n: usize, timeout: Duration) -> String {
    eventually(&format!("trial {n}"), timeout, || async {
        let sweep = sweep_json(cluster, id).await;
        match sweep["trials"][n]["training_id"].as_str() {
            Some(t) => Ok(t.to_string()),
            None => Err(sweep.to_string()),
        }
    })
    .await
}

fn create_args<'a>(
    base: &'a str,
    space: &'a str,
    objective: &'a str,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec![
        "sweep",
        "create",
        "--config",
        base,
        "--space",
        space,
        "--objective",
        objective,
        "--gpus",
        "1",
    ];
    args.extend_from_slice(extra);
    args
}

/// Waits for the sweep to end, checking at every look that no more than
/// `max` of its trials had not ended (a trial paused at a rung holds no
/// GPU and does not count).
async fn run_to_end(cluster: &Cluster, id: &str, max: usize, timeout: Duration) -> Value {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let sweep = sweep_json(cluster, id).await;
        let trials = sweep["trials"].as_array().cloned().unwrap_or_default();
        let live = trials
            .iter()
            .filter(|t| {
                !matches!(
                    t["state"].as_str(),
                    Some("SUCCEEDED" | "FAILED" | "CANCELLED")
                ) && t["paused"] != true
            })
            .count();
        assert!(live <= max, "{live} trials not ended at once: {sweep}");
        if sweep["state"] != "RUNNING" {
            return sweep;
        }
        if tokio::time::Instant::now() > deadline {
            cluster.fail(&format!("sweep {id} still running: {sweep}"));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_random_sweep_runs_its_trials_within_max_concurrent_and_names_the_best() {
    random_sweep(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_random_sweep_on_postgresql() {
    random_sweep(Backend::Postgres).await;
}

async fn random_sweep(backend: Backend) {
    let cluster = Cluster::start(ClusterOptions::new(backend, 1)).await;
    let id = create(
        &cluster,
        &SaeJob::small(),
        SPACE,
        &[
            "--max-trials",
            "4",
            "--max-concurrent",
            "2",
            "--seed",
            "7",
            "--name",
            "lr-dsae",
        ],
    )
    .await;
    assert!(id.starts_with("swp-"), "create prints the id: {id}");

    let sweep = run_to_end(&cluster, &id, 2, Duration::from_secs(240)).await;
    assert_eq!(sweep["state"], "SUCCEEDED", "{sweep}");
    let trials = sweep["trials"].as_array().expect("trials");
    assert_eq!(trials.len(), 4, "{sweep}");
    // Seeded: the params are the space's draws 0..3 for seed 7.
    let expected = Space::from_toml(SPACE).unwrap();
    for (i, t) in trials.iter().enumerate() {
        assert_eq!(t["state"], "SUCCEEDED", "{t}");
        let drawn = expected.draw(7, i as u64).unwrap();
        let lr = t["params"]["optim.learning_rate"].as_f64().expect("lr");
        let want = drawn["optim.learning_rate"].as_f64().unwrap();
        assert!(
            (lr - want).abs() <= want * 1e-12,
            "trial {i}: {lr} vs {want}"
        );
        assert_eq!(
            t["params"]["model.d_sae"].as_f64(),
            drawn["model.d_sae"].as_f64(),
            "{t}"
        );
        let training = cluster
            .get_training(t["training_id"].as_str().unwrap())
            .await;
        assert_eq!(training.labels.get("sweep"), Some(&id), "{training:?}");
        assert_eq!(
            training.priority_class, "low",
            "trials are preemptible by default"
        );
        let config = training.config.expect("config");
        assert_eq!(
            config.model.expect("model").d_sae,
            drawn["model.d_sae"].as_i64(),
            "the trial trains with its params"
        );
    }
    // The best is the lowest final loss.
    let best = sweep["best"].as_array().expect("best");
    assert_eq!(best.len(), 4, "{sweep}");
    let lowest = trials
        .iter()
        .min_by(|a, b| {
            a["objective"]
                .as_f64()
                .unwrap()
                .total_cmp(&b["objective"].as_f64().unwrap())
        })
        .unwrap();
    assert_eq!(best[0], lowest["training_id"], "{sweep}");
    assert!(sweep["gpu_hours"].as_f64().unwrap() > 0.0, "{sweep}");

    // Never more than two trials alive at once, from the stored times: a
    // trial is alive from its creation to its end.
    let mut spans: Vec<(f64, f64)> = Vec::new();
    for t in trials {
        let training = cluster
            .get_training(t["training_id"].as_str().unwrap())
            .await;
        let at = |ts: &Option<prost_types::Timestamp>| {
            let ts = ts.as_ref().expect("a time");
            ts.seconds as f64 + f64::from(ts.nanos) * 1e-9
        };
        spans.push((at(&training.create_time), at(&training.end_time)));
    }
    for (start, _) in &spans {
        let alive = spans
            .iter()
            .filter(|(s, e)| s <= start && start < e)
            .count();
        assert!(alive <= 2, "{alive} trials alive at {start}: {spans:?}");
    }

    let table = cluster.cli_ok(&["sweep", "get", &id]).await;
    assert!(
        table.contains("SUCCEEDED") && table.contains("d_sae"),
        "{table}"
    );
    let listed = cluster.cli_ok(&["sweep", "list"]).await;
    assert!(
        listed.contains(&id) && listed.contains("lr-dsae"),
        "{listed}"
    );
    let by_label = cluster
        .cli_ok(&["train", "list", "--label", &format!("sweep={id}")])
        .await;
    assert_eq!(by_label.matches("SUCCEEDED").count(), 4, "{by_label}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_goes_on_after_a_coordinator_restart_and_a_cancel_stops_its_trials() {
    let mut cluster = Cluster::start(ClusterOptions::new(Backend::Sqlite, 1)).await;
    let id = create(
        &cluster,
        &SaeJob::with_steps(1500),
        SPACE,
        &["--max-trials", "6", "--max-concurrent", "1"],
    )
    .await;
    let first = trial(&cluster, &id, 0, Duration::from_secs(30)).await;
    cluster
        .wait_state(
            &first,
            v1::training::State::Running,
            Duration::from_secs(60),
        )
        .await;
    cluster.restart_coordinator().await;
    // The new coordinator starts the second trial once the first ends, and
    // never a second trial 0 or 1.
    let second = trial(&cluster, &id, 1, Duration::from_secs(180)).await;
    assert_eq!(
        cluster.get_training(&first).await.state(),
        v1::training::State::Succeeded
    );
    let cancelled = cluster
        .cli_ok(&["sweep", "cancel", &id, "--reason", "enough"])
        .await;
    assert!(cancelled.contains("CANCELLED"), "{cancelled}");
    let sweep = sweep_json(&cluster, &id).await;
    assert_eq!(sweep["state"], "CANCELLED", "{sweep}");
    assert_eq!(sweep["trials"].as_array().unwrap().len(), 2, "{sweep}");
    let second_now = cluster.get_training(&second).await;
    assert_eq!(
        second_now.state(),
        v1::training::State::Cancelled,
        "{second_now:?}"
    );
    assert!(second_now.state_reason.contains("enough"), "{second_now:?}");
    cluster
        .assert_no_rank_processes(Duration::from_secs(30))
        .await;
    // Nothing starts after the cancel.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let labelled = cluster
        .cli_ok(&[
            "-o",
            "json",
            "train",
            "list",
            "--label",
            &format!("sweep={id}"),
        ])
        .await;
    assert_eq!(
        labelled.matches("\"id\":\"trn-").count() + labelled.matches("\"id\": \"trn-").count(),
        2,
        "{labelled}"
    );
    let again = cluster.cli(&["sweep", "cancel", &id]).await;
    assert!(
        again.status.success(),
        "cancelling a cancelled sweep returns it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_sweeps_are_refused_naming_the_field_and_write_nothing() {
    let cluster = Cluster::start(ClusterOptions::new(Backend::Sqlite, 1)).await;
    let mut client = SweepServiceClient::new(cluster.channel().await);
    let space = |text: &str| cohort_proto::sweep::space_to_proto(&Space::from_toml(text).unwrap());
    let good = v1::CreateSweepRequest {
        config: Some(SaeJob::small().proto()),
        space: space(SPACE),
        objective: Some(v1::SweepObjective {
            metric: "loss".into(),
            direction: 0,
        }),
        max_trials: 2,
        ..Default::default()
    };
    let cases: Vec<(&str, v1::CreateSweepRequest, &str)> = vec![
        (
            "an empty space",
            v1::CreateSweepRequest {
                space: vec![],
                ..good.clone()
            },
            "space",
        ),
        (
            "low >= high",
            v1::CreateSweepRequest {
                space: vec![v1::SweepParameter {
                    key: "optim.learning_rate".into(),
                    distribution: Some(v1::sweep_parameter::Distribution::Uniform(
                        v1::sweep_parameter::Range {
                            low: 0.01,
                            high: 0.001,
                        },
                    )),
                }],
                ..good.clone()
            },
            "space[optim.learning_rate]",
        ),
        (
            "an objective the SAE never reports",
            v1::CreateSweepRequest {
                objective: Some(v1::SweepObjective {
                    metric: "accuracy".into(),
                    direction: 0,
                }),
                ..good.clone()
            },
            "objective.metric",
        ),
        (
            "a value no config takes",
            v1::CreateSweepRequest {
                space: space("\"model.d_sae\" = { choice = [64, -1] }"),
                ..good.clone()
            },
            "space[model.d_sae]",
        ),
        (
            "a grid over a continuous range",
            v1::CreateSweepRequest {
                searcher: v1::Searcher::Grid as i32,
                ..good.clone()
            },
            "space[optim.learning_rate]",
        ),
        (
            "a direction for the frontier",
            v1::CreateSweepRequest {
                objective: Some(v1::SweepObjective {
                    metric: "frontier".into(),
                    direction: v1::sweep_objective::Direction::Minimize as i32,
                }),
                ..good.clone()
            },
            "objective.direction",
        ),
        (
            "the median of a frontier",
            v1::CreateSweepRequest {
                searcher: v1::Searcher::Median as i32,
                objective: Some(v1::SweepObjective {
                    metric: "frontier".into(),
                    direction: 0,
                }),
                ..good.clone()
            },
            "objective.metric",
        ),
        (
            "too many at once",
            v1::CreateSweepRequest {
                max_concurrent: 65,
                ..good.clone()
            },
            "max_concurrent",
        ),
    ];
    for (what, request, field) in cases {
        let status = expect_error(
            what,
            client.create_sweep(request).await,
            Code::InvalidArgument,
            Reason::InvalidArgument,
        );
        assert_eq!(
            bad_fields(&status),
            vec![field.to_string()],
            "{what}: {status:?}"
        );
    }
    let listed = client
        .list_sweeps(v1::ListSweepsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(listed.sweeps.is_empty(), "nothing written: {listed:?}");
    expect_error(
        "an unknown sweep",
        client
            .get_sweep(v1::GetSweepRequest {
                id: "swp-nothing".into(),
            })
            .await,
        Code::NotFound,
        Reason::SweepNotFound,
    );
    // The same request_id twice: one sweep.
    let keyed = v1::CreateSweepRequest {
        request_id: "once".into(),
        max_concurrent: 1,
        ..good
    };
    let a = client
        .create_sweep(keyed.clone())
        .await
        .unwrap()
        .into_inner();
    let b = client.create_sweep(keyed).await.unwrap().into_inner();
    assert_eq!(a.id, b.id);
    client
        .cancel_sweep(v1::CancelSweepRequest {
            id: a.id,
            reason: String::new(),
        })
        .await
        .unwrap();
}

/// A seed whose first draw of `space` gives `key` = `first` and whose
/// second does not.
fn seed_drawing(space: &str, key: &str, first: f64) -> u64 {
    let space = Space::from_toml(space).unwrap();
    let is_first = |seed: u64, i: u64| space.draw(seed, i).unwrap()[key].as_f64() == Some(first);
    (1..1000u64)
        .find(|s| is_first(*s, 0) && !is_first(*s, 1))
        .expect("a seed whose first draw is the first value and second not")
}

/// ASHA's flags for two trials of `seed`, one at a time.
fn two_trials_by_asha(seed: &str) -> [&str; 8] {
    [
        "--searcher",
        "asha",
        "--max-trials",
        "2",
        "--max-concurrent",
        "1",
        "--seed",
        seed,
    ]
}

/// The `preempted` events of kind "pause" in trial `id`'s history, and the
/// steps its attempts started from.
async fn pauses(cluster: &Cluster, id: &str) -> (Vec<v1::PreemptedEvent>, Vec<i64>) {
    let run = watch_to_end(&mut cluster.training().await, id, Duration::from_secs(30)).await;
    let pauses = run
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Some(Event::Preempted(p)) if p.kind == "pause" => Some(p.clone()),
            _ => None,
        })
        .collect();
    (pauses, run.start_steps())
}

/// ASHA, one trial at a time: the first (a useful learning rate) pauses
/// at rung 1 with a checkpoint, since too few trials reached it, and the
/// coordinator restarts with it paused; the second (a learning rate too
/// small to learn) reaches the rung worse and pauses too; with no trial
/// left to come the better is promoted, resumes from its checkpoint and
/// finishes, and the worse ends stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asha_pauses_at_a_rung_promotes_the_better_after_a_restart_and_stops_the_worse() {
    const ASHA_SPACE: &str = "\"optim.learning_rate\" = { choice = [0.003, 0.00001] }\n";
    let seed = seed_drawing(ASHA_SPACE, "optim.learning_rate", 0.003).to_string();
    let mut cluster = Cluster::start(ClusterOptions::new(Backend::Sqlite, 1)).await;
    let id = create(
        &cluster,
        &SaeJob::with_steps(20_000),
        ASHA_SPACE,
        &two_trials_by_asha(&seed),
    )
    .await;
    eventually("trial 0 paused", Duration::from_secs(120), || async {
        let sweep = sweep_json(&cluster, &id).await;
        match sweep["trials"][0]["paused"] == true {
            true => Ok(()),
            false => Err(sweep.to_string()),
        }
    })
    .await;
    // The pause and the hold are in the database: a new coordinator goes on.
    cluster.restart_coordinator().await;
    let sweep = run_to_end(&cluster, &id, 1, Duration::from_secs(300)).await;
    assert_eq!(sweep["state"], "SUCCEEDED", "{sweep}");
    assert_eq!(sweep["eta"], 3.0, "{sweep}");
    let trials = sweep["trials"].as_array().unwrap();
    let (first, second) = (&trials[0], &trials[1]);
    assert_eq!(first["state"], "SUCCEEDED", "{first}");
    assert_eq!(first["rungs"].as_array().unwrap().len(), 2, "{first}");
    assert_eq!(second["state"], "CANCELLED", "{second}");
    let reason = second["state_reason"].as_str().unwrap();
    assert!(
        reason.starts_with("STOPPED_BY_SEARCHER: loss")
            && reason.contains("(rung 1 of 2)")
            && reason.contains("ASHA")
            && reason.contains("not promoted"),
        "{reason}"
    );
    let stopped_at = second["step"].as_i64().unwrap();
    assert!(
        (2223..20_000).contains(&stopped_at),
        "stopped at {stopped_at}"
    );
    assert_eq!(sweep["best"][0], first["training_id"], "{sweep}");

    // The better one paused once, with a checkpoint, and went on from it.
    let (paused, starts) = pauses(&cluster, first["training_id"].as_str().unwrap()).await;
    assert_eq!(paused.len(), 1, "{paused:?}");
    assert_eq!(paused[0].by, id);
    assert!(paused[0].checkpointed, "{paused:?}");
    let at = paused[0].resume_step.expect("a checkpoint to resume from");
    assert!((2223..20_000).contains(&at), "paused at {at}");
    assert_eq!(starts, vec![0, at], "promoted: it resumed where it paused");
    // The worse one paused and never ran again.
    let (paused, starts) = pauses(&cluster, second["training_id"].as_str().unwrap()).await;
    assert_eq!(
        (paused.len(), starts.len()),
        (1, 1),
        "{paused:?} {starts:?}"
    );

    let table = cluster.cli_ok(&["sweep", "get", &id]).await;
    assert!(
        table.contains("STOPPED_BY_SEARCHER") && table.contains("1:"),
        "{table}"
    );
}

/// The frontier keeps a sparse trial that ranking on the loss stops: the
/// same two trials (a tiny L1 coefficient, then a large one: sparser, less
/// faithful, and a higher loss) under ASHA, judged on the loss in one sweep
/// and on the L0 / explained-variance frontier in the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_frontier_keeps_a_sparse_trial_that_the_loss_stops() {
    const L1_SPACE: &str = "\"model.l1_coefficient\" = { choice = [0.0001, 0.3] }\n";
    let seed = seed_drawing(L1_SPACE, "model.l1_coefficient", 0.0001).to_string();
    let cluster = Cluster::start(ClusterOptions::new(Backend::Sqlite, 1)).await;
    let job = SaeJob::with_steps(20_000);
    let flags = two_trials_by_asha(&seed);
    // One after the other: two ranks at once on a small machine's cores
    // slow each other down many times over.
    let timeout = Duration::from_secs(300);
    let by_loss = create_judged(&cluster, &job, L1_SPACE, "loss", &flags).await;
    let by_loss = run_to_end(&cluster, &by_loss, 1, timeout).await;
    let by_frontier = create_judged(&cluster, &job, L1_SPACE, "frontier", &flags).await;
    let by_frontier = run_to_end(&cluster, &by_frontier, 1, timeout).await;

    // On the loss, the sparse trial is worse at rung 1 and is stopped.
    let loss_trials = by_loss["trials"].as_array().unwrap();
    let (dense, sparse) = (&loss_trials[0], &loss_trials[1]);
    assert_eq!(dense["state"], "SUCCEEDED", "{by_loss}");
    assert_eq!(sparse["state"], "CANCELLED", "{by_loss}");
    assert!(
        sparse["state_reason"]
            .as_str()
            .unwrap()
            .starts_with("STOPPED_BY_SEARCHER: loss"),
        "{sparse}"
    );
    let rung1 = |t: &Value| t["rungs"][0]["value"].as_f64().unwrap();
    assert!(rung1(sparse) > rung1(dense), "{by_loss}");

    // On the frontier, it is the sparse end of the frontier and goes on.
    assert_eq!(by_frontier["state"], "SUCCEEDED", "{by_frontier}");
    let trials = by_frontier["trials"].as_array().unwrap();
    let (dense, sparse) = (&trials[0], &trials[1]);
    for t in [dense, sparse] {
        assert_eq!(t["state"], "SUCCEEDED", "{by_frontier}");
        assert_eq!(t["on_frontier"], true, "{by_frontier}");
        assert_eq!(t["objective"], 0.0, "on the frontier: no distance");
    }
    let at_rung1 = |t: &Value| {
        let r = &t["rungs"][0];
        (r["l0"].as_f64().unwrap(), r["value"].as_f64().unwrap())
    };
    let ((dense_l0, dense_ev), (sparse_l0, sparse_ev)) = (at_rung1(dense), at_rung1(sparse));
    assert!(
        sparse_l0 < dense_l0 && sparse_ev < dense_ev,
        "a trade-off at rung 1: dense L0 {dense_l0} EV {dense_ev}, sparse L0 {sparse_l0} EV {sparse_ev}"
    );
    // Best: the frontier, sparsest first.
    assert_eq!(
        by_frontier["best"],
        serde_json::json!([sparse["training_id"], dense["training_id"]]),
        "{by_frontier}"
    );
    assert!(by_frontier["frontier_hypervolume"].as_f64().unwrap() > 0.0);
    let table = cluster
        .cli_ok(&["sweep", "get", by_frontier["id"].as_str().unwrap()])
        .await;
    assert!(
        table.contains("on the frontier") && table.contains("DISTANCE"),
        "{table}"
    );
}
