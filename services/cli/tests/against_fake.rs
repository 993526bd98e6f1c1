//! The real `cohort` binary against a scripted in-process gRPC server that
//! speaks `cohort.v1`: paging, streams, lag replay, a restarted server, error
//! details over the wire, exit codes. End-to-end tests against the real
//! coordinator live in integration-tests.

mod fake;

use fake::{cohort, config_file, serve, stderr, stdout, Fake, Killable};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_follow_every_page() {
    let url = serve().await;
    // gpus: every page, as a table and as JSON.
    let o = cohort(&url, &["gpus"]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.starts_with("AGENT  IDX  UUID"), "{text}");
    assert!(text.contains("SIM-0") && text.contains("SIM-1"), "{text}");
    assert!(text.contains("* simulated GPU"), "{text}");
    let o = cohort(&url, &["-o", "json", "gpus"]).await;
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["gpus"].as_array().unwrap().len(), 2);
    assert_eq!(v["gpus"][1]["info"]["uuid"], "SIM-1");
    assert_eq!(v["gpus"][0]["availability"], "GPU_AVAILABILITY_AVAILABLE");

    // gpus recommend / validate / estimate.
    let config = config_file("lists_follow_every_page");
    let config = config.to_str().unwrap();
    let o = cohort(
        &url,
        &["gpus", "recommend", "--config", config, "--count", "2"],
    )
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.starts_with("each GPU needs 515.3 MiB free\nAGENT"),
        "{text}"
    );
    assert!(text.contains("SIM-1") && !text.contains("SIM-0"), "{text}");
    assert!(
        text.ends_with("fewer than asked: only 1 GPU is free\n"),
        "{text}"
    );
    let o = cohort(&url, &["gpus", "validate", "SIM-0,GPU-x"]).await;
    assert_eq!(o.status.code(), Some(6), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("GPU-x  GPU_NOT_FOUND  no agent has GPU GPU-x"),
        "{}",
        stdout(&o)
    );
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    let o = cohort(&url, &["-o", "json", "gpus", "validate", "SIM-0", "SIM-1"]).await;
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["valid"], true);
    let o = cohort(&url, &["gpus", "estimate", "--config", config]).await;
    assert!(
        stdout(&o).contains("total per GPU    515.3 MiB"),
        "{}",
        stdout(&o)
    );
    let _ = std::fs::remove_file(config);

    // agents.
    let o = cohort(&url, &["agents"]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("2 (2 simulated)"), "{}", stdout(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_from_file_or_flags_and_wait() {
    let url = serve().await;
    // submit with an override, then --wait follows it to SUCCEEDED.
    let config = config_file("submit_from_file_or_flags_and_wait");
    let config = config.to_str().unwrap();
    let o = cohort(
        &url,
        &[
            "train", "submit", "--config", config, "--steps", "20", "--wait",
        ],
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.starts_with("submitted training t-1: QUEUED (waiting for 2 GPUs)"),
        "{text}"
    );
    assert!(
        text.contains("[2] state RUNNING: placed on 2 GPUs"),
        "{text}"
    );
    assert!(text.contains("20/20 100%  loss 0.2500"), "{text}");
    assert!(
        text.trim_end().ends_with("training t-1 SUCCEEDED"),
        "{text}"
    );
    let o = cohort(
        &url,
        &[
            "-o", "json", "train", "submit", "--config", config, "--steps", "7",
        ],
    )
    .await;
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["display_name"], "steps=7",
        "the override reached the server"
    );
    assert_eq!(v["config"]["optim"]["steps"], 7);

    let o = cohort(&url, &["train", "submit", "-q", "--config", config]).await;
    assert_eq!(stdout(&o), "t-1\n");
    // A whole config from flags, no file.
    let o = cohort(
        &url,
        &[
            "-o",
            "json",
            "train",
            "submit",
            "--d-in",
            "16",
            "--expansion-factor",
            "4",
            "--batch-size",
            "8",
            "--steps",
            "9",
            "--synthetic-samples",
            "256",
        ],
    )
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["config"]["model"]["expansion_factor"], 4);
    assert_eq!(v["config"]["data"]["synthetic"]["num_samples"], 256);
    let _ = std::fs::remove_file(config);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_human_words_with_exit_codes() {
    let url = serve().await;
    let config = config_file("refusals_are_human_words_with_exit_codes");
    let config = config.to_str().unwrap();
    // Server-side refusals arrive as human words and exit codes.
    let o = cohort(&url, &["train", "submit", "--config", config, "--no-queue"]).await;
    assert_eq!(o.status.code(), Some(6));
    assert_eq!(
        stderr(&o),
        "error: not enough free GPUs (without --no-queue the training waits in the queue): \
         2 GPUs requested, 1 free\n"
    );
    let o = cohort(
        &url,
        &[
            "train",
            "submit",
            "--config",
            config,
            "--request-id",
            "bad-config",
        ],
    )
    .await;
    assert_eq!(o.status.code(), Some(4));
    assert_eq!(
        stderr(&o),
        "error: the config is invalid: model.d_in: must be in 1..=65536\n"
    );
    let o = cohort(&url, &["-o", "json", "train", "get", "t-404"]).await;
    assert_eq!(o.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&o.stderr).unwrap();
    assert_eq!(v["error"]["grpc_code"], "NOT_FOUND");
    assert_eq!(v["error"]["reason"], "TRAINING_NOT_FOUND");
    let o = cohort(&url, &["train", "get", "t-404"]).await;
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(stderr(&o), "error: no such training: no training t-404\n");
    let _ = std::fs::remove_file(config);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_ends_with_the_final_state_and_replays_what_it_missed() {
    let url = serve().await;
    // watch: a failure ends non-zero with the reason.
    let o = cohort(&url, &["train", "watch", "t-fail"]).await;
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        "error: training t-fail ended FAILED: rank 1 exited with code 11\n"
    );

    // watch: a lag notice, then the missed events replayed, in JSON lines.
    let o = cohort(&url, &["-o", "json", "train", "watch", "t-lag"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lines: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seqs: Vec<u64> = lines
        .iter()
        .map(|l| l["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, vec![1, 0, 2, 3, 4, 5]);
    assert_eq!(lines[1]["lagged"]["missed_events"], 3);
    assert_eq!(lines[5]["state_change"]["to"], "SUCCEEDED");

    // watch: a broken stream is reopened after the last event seen.
    let o = cohort(&url, &["train", "watch", "t-drop"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("lost the coordinator (connection reset); reconnecting for up to 120 s"),
        "{text}"
    );
    assert!(
        text.contains("reconnected; resuming after sequence 2"),
        "{text}"
    );
    assert_eq!(
        text.matches("state RUNNING").count(),
        1,
        "no event twice: {text}"
    );
    assert!(
        text.trim_end().ends_with("training t-drop SUCCEEDED"),
        "{text}"
    );
    let o = cohort(&url, &["-o", "json", "train", "watch", "t-drop"]).await;
    let seqs: Vec<u64> = stdout(&o)
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["sequence"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5]);
    assert!(
        stderr(&o).contains("reconnected"),
        "notices go to stderr in JSON mode"
    );

    // watch: a stream that ends before the training is reopened too.
    let o = cohort(&url, &["train", "watch", "t-early"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("lost the coordinator (the stream ended while the training was RUNNING)"),
        "{text}"
    );
    assert!(
        text.contains("reconnected; resuming after sequence 2"),
        "{text}"
    );
    assert!(
        text.trim_end().ends_with("training t-early SUCCEEDED"),
        "{text}"
    );

    // watch from a sequence number.
    let o = cohort(
        &url,
        &[
            "-o",
            "json",
            "train",
            "watch",
            "t-1",
            "--from-sequence",
            "4",
        ],
    )
    .await;
    assert_eq!(stdout(&o).lines().count(), 1, "{}", stdout(&o));
}

#[tokio::test]
async fn logs_are_prefixed_by_rank() {
    let url = serve().await;
    let o = cohort(&url, &["logs", "t-1", "--rank", "1", "--tail", "5"]).await;
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "[rank 0] asked for ranks [1] tail 5",
            "[rank 0] step 1",
            "[rank 1] step 1"
        ]
    );
    let o = cohort(&url, &["logs", "t-404"]).await;
    assert!(!o.status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_list_cancel_and_checkpoints() {
    let url = serve().await;
    // get: details and the transitions from the history.
    let o = cohort(&url, &["train", "get", "t-1"]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("state:        SUCCEEDED"), "{text}");
    assert!(
        text.contains("QUEUED   RUNNING    placed on 2 GPUs"),
        "{text}"
    );

    // list: one page with a hint, or every page.
    let o = cohort(&url, &["train", "list"]).await;
    let text = stdout(&o);
    assert!(text.contains("t-3") && !text.contains("t-1 "), "{text}");
    assert!(text.contains("--page-token p2"), "{text}");
    let o = cohort(&url, &["-o", "json", "train", "list", "--all"]).await;
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["trainings"].as_array().unwrap().len(), 3);
    assert_eq!(v["next_page_token"], "");
    let o = cohort(&url, &["train", "list", "--page-token", "zzz"]).await;
    assert_eq!(o.status.code(), Some(4));

    // cancel and checkpoints.
    let o = cohort(&url, &["train", "cancel", "t-2"]).await;
    assert_eq!(stdout(&o), "training t-2: CANCELLED\n");
    let o = cohort(&url, &["checkpoints", "t-1"]).await;
    assert!(stdout(&o).contains("/runs/t-1/ckpt-20"), "{}", stdout(&o));

    // download: chunks land at their offsets; files appear only when whole.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ckpt");
    let o = cohort(
        &url,
        &[
            "checkpoints",
            "download",
            "t-1",
            "--out",
            out.to_str().unwrap(),
        ],
    )
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(out.join("manifest.json")).unwrap(),
        b"{\"a\":1"
    );
    assert_eq!(
        std::fs::read(out.join("state.safetensors")).unwrap(),
        b"xyz"
    );
    assert!(
        stdout(&o).contains("checkpoint step 20 of t-1"),
        "{}",
        stdout(&o)
    );
    let o = cohort(
        &url,
        &[
            "checkpoints",
            "download",
            "t-evil",
            "--out",
            out.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("bad file name"), "{}", stderr(&o));
    assert!(!dir.path().join("escape").exists());
    let o = cohort(
        &url,
        &[
            "checkpoints",
            "download",
            "t-short",
            "--out",
            dir.path().join("short").to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("after 3 of 10 bytes"), "{}", stderr(&o));
    assert!(!dir.path().join("short/state.safetensors").exists());
    let o = cohort(
        &url,
        &[
            "checkpoints",
            "download",
            "t-9",
            "--out",
            out.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_and_alerts() {
    let url = serve().await;
    // telemetry: an endless stream, stopped after --count updates.
    let o = cohort(
        &url,
        &[
            "-o",
            "json",
            "telemetry",
            "watch",
            "--view",
            "per-gpu",
            "--count",
            "3",
        ],
    )
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<String> = stdout(&o).lines().map(String::from).collect();
    assert_eq!(lines.len(), 3);
    let v: serde_json::Value = serde_json::from_str(&lines[2]).unwrap();
    assert_eq!(v["view"], "METRICS_VIEW_PER_GPU");
    assert_eq!(v["gpus"][0]["sample"]["utilization_gpu_percent"], 50.0);
    // query: every page, aggregated buckets.
    let o = cohort(
        &url,
        &[
            "telemetry",
            "query",
            "--view",
            "aggregated",
            "--since",
            "1h",
            "--step",
            "1m",
        ],
    )
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.starts_with("TIME                  GPUS  BUSY"),
        "{text}"
    );
    assert!(text.contains("40%") && text.contains("41%"), "{text}");
    let o = cohort(&url, &["-o", "json", "telemetry", "query"]).await;
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["updates"].as_array().unwrap().len(), 2);
    // history: its request is accepted (start_time set) and every page read.
    let o = cohort(
        &url,
        &["-o", "json", "telemetry", "history", "--since", "1h"],
    )
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["gpus"].is_array() && v["step_seconds"].as_f64() > Some(0.0),
        "{v}"
    );

    // alerts: the active one first, then live ones, stopped after --count.
    let o = cohort(&url, &["alerts", "watch", "--active", "--count", "2"]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.starts_with(
            "2026-11-18T11:06:40Z  WARNING   raised    GPU_TEMPERATURE_HIGH: GPU SIM-0 is at 91 C \
             (agent a-1, gpu SIM-0)\n"
        ),
        "{text}"
    );
    assert!(text.contains("resolved"), "{text}");
    let o = cohort(&url, &["-o", "json", "alerts", "watch", "--count", "1"]).await;
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["alert"]["severity"], "ALERT_SEVERITY_WARNING");
    assert_eq!(v["alert"]["threshold"], 85.0);

    let o = cohort(&url, &["telemetry", "watch", "--count", "2"]).await;
    let text = stdout(&o);
    assert_eq!(text.matches("GPU metrics at").count(), 2, "{text}");
    assert!(text.contains("SIM-0 *"), "{text}");
}

#[test]
fn watch_resumes_after_the_coordinator_restarts() {
    use std::io::{BufRead, BufReader};
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let first = Killable::start(Fake { hang: true }, addr);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args(["--coordinator", &format!("http://{addr}")])
        .args(["train", "watch", "t-restart", "--reconnect-timeout", "30"])
        .env_remove("COHORT_COORDINATOR")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let wait = std::time::Duration::from_secs(20);
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|l: &String| l.contains("[2] state RUNNING"))
    {
        seen.push(rx.recv_timeout(wait).expect("the first two events"));
    }
    first.kill();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let second = Killable::start(Fake { hang: false }, addr);
    while let Ok(line) = rx.recv_timeout(wait) {
        seen.push(line);
    }
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    let text = seen.join("\n");
    if std::env::var_os("COHORT_TEST_SHOW").is_some() {
        eprintln!("{text}\n{err}[exit {:?}]", status.code());
    }
    assert_eq!(status.code(), Some(0), "{text}\n{err}");
    assert!(text.contains("lost the coordinator"), "{text}");
    assert!(
        text.contains("reconnected; resuming after sequence 2"),
        "{text}"
    );
    assert_eq!(text.matches("state RUNNING").count(), 1, "{text}");
    assert!(text.ends_with("training t-restart SUCCEEDED"), "{text}");
    second.kill();
}

#[test]
fn ctrl_c_stops_a_watch_with_exit_130() {
    use std::io::{BufRead, BufReader};
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    // The stream sends its first events, then nothing more.
    let server = Killable::start(Fake { hang: true }, addr);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args(["--coordinator", &format!("http://{addr}")])
        .args(["train", "watch", "t-restart"])
        .env_remove("COHORT_COORDINATOR")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    for line in stdout.lines().map_while(Result::ok) {
        if line.contains("[2] state RUNNING") {
            break;
        }
    }
    let kill = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still running 10 s after Ctrl-C"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(130));
    server.kill();
}

#[tokio::test]
async fn classes_are_listed_highest_first_with_the_default_marked() {
    let url = serve().await;
    let o = cohort(&url, &["train", "classes"]).await;
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], ["CLASS", "PRIORITY", "PREEMPTS", "DEFAULT"]);
    assert_eq!(rows[1], ["urgent", "1000", "yes"]);
    assert_eq!(rows[3], ["normal", "0", "no", "yes"]);
    let o = cohort(&url, &["-o", "json", "train", "classes"]).await;
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(json["default_class"], "normal");
    assert_eq!(json["classes"][1]["preempting"], true);
}
