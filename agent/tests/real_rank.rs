//! The supervisor with the real `cohort-rank` (gloo on CPU, two ranks). Needs a
//! built rank binary: `COHORT_RANK_BIN`, else `cohort-rank` beside this test's
//! build (`scripts/test.sh` builds every binary before the tests). It fails,
//! saying how to build it, when there is none.

// Tests may block: they are not the async runtime's production paths.
#![allow(clippy::disallowed_methods)]

use std::path::PathBuf;
use std::time::Duration;

use cohort_agent::supervisor::{RankEventKind, RankKey, RankSpec, Supervisor};
use cohort_spec::progress::{Progress, ProgressLine};
use cohort_spec::ExitClass;
use tokio::sync::mpsc;

const CONFIG: &str = r#"
[model]
d_in = 16
d_sae = 64
[optim]
batch_size = 64
steps = 40
seed = 3
[checkpoint]
every_steps = 20
[data.synthetic]
num_samples = 4096
num_features = 32
[runtime]
log_every_steps = 10
"#;

fn rank_binary() -> PathBuf {
    let Some(path) = std::env::var_os("COHORT_RANK_BIN").map(PathBuf::from) else {
        // <target>/debug/deps/real_rank-<hash> -> <target>/debug/cohort-rank
        let exe = std::env::current_exe().expect("test executable path");
        let profile = exe
            .parent()
            .and_then(|d| d.parent())
            .expect("target profile dir");
        let beside = profile.join("cohort-rank");
        assert!(
            beside.is_file(),
            "{} is missing: build it (source scripts/env.sh && cargo build -p cohort-rank) or set COHORT_RANK_BIN",
            beside.display()
        );
        return beside;
    };
    // Relative paths are relative to the workspace root, like cargo's output.
    if path.is_relative() {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(path)
    } else {
        path
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_real_ranks_train_to_success() {
    let program = rank_binary();
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("config.toml");
    std::fs::write(&config_path, CONFIG).unwrap();
    std::fs::create_dir_all(dir.path().join("run")).unwrap();
    let port = cohort_testkit::free_port();
    let (tx, mut rx) = mpsc::channel(1024);
    let mut supervisor = Supervisor::new(tx, Duration::from_secs(5));
    for rank in 0..2 {
        supervisor
            .start(RankSpec {
                key: RankKey::new("real", 1, rank),
                program: program.clone(),
                args: RankSpec::cohort_rank_args(&config_path, &dir.path().join("run")),
                working_dir: dir.path().join("run"),
                checkpoints: None,
                sandbox: None,
                log_path: dir.path().join(format!("rank-{rank}.log")),
                run_dir: dir.path().join("run"),
                world_size: 2,
                world_sizes: (2, 2),
                local_rank: rank,
                local_world_size: 2,
                group_rank: 0,
                group_world_size: 1,
                max_restarts: 0,
                master_addr: "127.0.0.1".into(),
                master_port: port,
                gpu_index: rank,
                cuda_visible_devices: String::new(),
                extra_env: vec![],
                base_env: std::env::vars().collect(),
                memory_limit: None,
                notice: None,
            })
            .await
            .unwrap();
    }

    let mut losses = Vec::new();
    let mut finished = false;
    let mut exits = Vec::new();
    while exits.len() < 2 {
        let event = tokio::time::timeout(Duration::from_secs(120), rx.recv())
            .await
            .expect("ranks finish in time")
            .unwrap();
        match event.kind {
            RankEventKind::Progress(ProgressLine::Progress(Progress { loss, .. })) => {
                losses.push(loss)
            }
            RankEventKind::Progress(ProgressLine::Finished { .. }) => finished = true,
            RankEventKind::Exited(exit) => exits.push((event.key.rank, exit)),
            _ => {}
        }
    }
    for (rank, exit) in &exits {
        assert_eq!(
            exit.class,
            ExitClass::Success,
            "rank {rank}: {:?}\n{}",
            exit.code,
            exit.stderr_tail.join("\n")
        );
    }
    assert!(finished, "rank 0 reported finished");
    assert!(losses.len() >= 2, "{losses:?}");
    assert!(losses.last() < losses.first(), "loss falls: {losses:?}");
    assert!(dir.path().join("run/checkpoints").is_dir());
}
