//! Each rank's host memory is bounded by its own memory cgroup (cgroup v2
//! `memory.max`, or v1 `memory.limit_in_bytes` as on this machine): a real
//! rank runs inside it with the training's limit, and a rank that outgrows
//! it is killed by the kernel and reported as out of memory, failing the
//! training with that reason (oom_policy "fail").

use cohort_integration_tests::job::create_request;
use cohort_integration_tests::{Backend, Cluster, ClusterOptions, SaeJob};
use cohort_proto::v1::training::State;
use cohort_testkit::eventually;
use std::path::PathBuf;
use std::time::Duration;

/// The memory cgroup directory of `pid`, or why there is none to check.
fn memory_cgroup(pid: u32) -> Result<PathBuf, String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).map_err(|e| e.to_string())?;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (
            parts.next(),
            parts.next().unwrap_or(""),
            parts.next().unwrap_or(""),
        );
        if controllers.split(',').any(|c| c == "memory") {
            return Ok(PathBuf::from("/sys/fs/cgroup/memory").join(path.trim_start_matches('/')));
        }
        if controllers.is_empty()
            && std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
        {
            return Ok(PathBuf::from("/sys/fs/cgroup").join(path.trim_start_matches('/')));
        }
    }
    Err(format!("pid {pid} is in no memory cgroup"))
}

fn limit_of(dir: &std::path::Path) -> Option<u64> {
    ["memory.max", "memory.limit_in_bytes"]
        .iter()
        .find_map(|f| std::fs::read_to_string(dir.join(f)).ok())
        .and_then(|v| v.trim().parse().ok())
}

/// Whether this host lets a process make memory cgroups (root with a
/// writable hierarchy): where it does not, the agent runs ranks unbounded
/// and says so, and there is nothing here to test.
fn cgroups_writable() -> bool {
    let probe =
        PathBuf::from("/sys/fs/cgroup/memory").join(format!("cohort-probe-{}", std::process::id()));
    let made = std::fs::create_dir(&probe).is_ok();
    let _ = std::fs::remove_dir(&probe);
    made || std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
}

fn job(extra: &str) -> SaeJob {
    SaeJob {
        tables: format!("host_memory_gib_per_rank = {extra}\n"),
        ..SaeJob::with_steps(200_000)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_runs_in_its_own_memory_cgroup_with_the_trainings_limit() {
    if !cgroups_writable() {
        eprintln!("SKIPPED: this host has no writable memory cgroup");
        return;
    }
    let cluster = Cluster::start(ClusterOptions::new(Backend::Sqlite, 1)).await;
    let id = cluster.create(create_request(&job("3"), 1, true)).await;
    let t = cluster
        .wait_state(&id, State::Running, Duration::from_secs(60))
        .await;
    let pid = t.ranks[0].pid;
    let dir = eventually(
        "the rank in its cgroup",
        Duration::from_secs(10),
        || async { memory_cgroup(pid) },
    )
    .await;
    assert!(
        dir.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(&format!("{id}.1.0")),
        "the rank's own cgroup: {}",
        dir.display()
    );
    assert!(
        dir.parent().unwrap().ends_with("cohort-ranks.agent-0"),
        "{}",
        dir.display()
    );
    assert_eq!(limit_of(&dir), Some(3 << 30));
    cluster.cancel(&id, "test over").await;
    eventually(
        "the rank's cgroup removed",
        Duration::from_secs(20),
        || async {
            if dir.exists() {
                Err(format!("{} still there", dir.display()))
            } else {
                Ok(())
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_over_its_host_memory_limit_is_killed_and_reported_out_of_memory() {
    if !cgroups_writable() {
        eprintln!("SKIPPED: this host has no writable memory cgroup");
        return;
    }
    let cluster = Cluster::start(ClusterOptions::new(Backend::Sqlite, 1)).await;
    // 64 MiB for a rank that holds a 128 MiB feature matrix (256 x 131072 f32).
    let greedy = SaeJob {
        d_in: 256,
        num_features: 131_072,
        tables: "host_memory_gib_per_rank = 0.0625\noom_policy = \"fail\"\n".into(),
        ..SaeJob::with_steps(1000)
    };
    let id = cluster.create(create_request(&greedy, 1, true)).await;
    let t = cluster
        .wait_state(&id, State::Failed, Duration::from_secs(120))
        .await;
    assert!(
        t.state_reason.contains("host memory limit of 0.06 GiB"),
        "the reason names the limit: {}",
        t.state_reason
    );
    assert_eq!(t.ranks[0].exit_code, Some(20), "{:?}", t.ranks[0]);
}
