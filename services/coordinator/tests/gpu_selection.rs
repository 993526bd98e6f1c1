//! GpuService's selection RPCs end to end: the real server on 127.0.0.1:0 and
//! three real `cohort-agent` processes with two simulated GPUs each. One GPU
//! gets a foreign process (a real `sleep`, scripted into the simulated probe
//! with `foreign_pid`): ListGpus shows it busy, the scheduler's free list skips
//! it, RecommendGpus packs 4 GPUs on 2 hosts around it and explains it, and
//! ValidateGpuSelection names a duplicate, an unknown and a busy GPU.
//!
//! Needs the agent binary next to this test's target dir:
//! `cargo build -p cohort-agent` (or `COHORT_AGENT_BIN=/path/to/cohort-agent`).

// Tests may block: they are not the async runtime's production paths.
#![allow(clippy::disallowed_methods)]

mod common;

use cohort_coordinator::context::Context;
use cohort_proto::v1;
use cohort_proto::v1::gpu_service_client::GpuServiceClient;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tonic::transport::Channel;

const GIB: u64 = 1 << 30;
const WAIT: Duration = Duration::from_secs(30);

fn agent_binary() -> PathBuf {
    let path = std::env::var_os("COHORT_AGENT_BIN").map_or_else(
        || {
            // target/debug/deps/<this test> -> target/debug/cohort-agent
            let exe = std::env::current_exe().unwrap();
            exe.parent().unwrap().parent().unwrap().join("cohort-agent")
        },
        PathBuf::from,
    );
    assert!(
        path.is_file(),
        "cohort-agent not found at {}: build it with `cargo build -p cohort-agent` \
         (same CARGO_TARGET_DIR as the tests) or set COHORT_AGENT_BIN",
        path.display()
    );
    path
}

/// A child process killed when the test ends, however it ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_agent(bin: &Path, url: &str, name: &str, dir: &Path, overrides: &Path) -> Reaped {
    let work = dir.join(name);
    std::fs::create_dir_all(&work).unwrap();
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    Reaped(
        Command::new(bin)
            .args(["--coordinator", url, "--name", name])
            .args(["--simulate-gpus", "2:16GiB", "--address", "127.0.0.1"])
            .args(["--interval", "200ms"])
            .arg("--simulate-overrides")
            .arg(overrides)
            .arg("--work-dir")
            .arg(&work)
            .env("RUST_LOG", "warn")
            .env_remove("COHORT_COORDINATOR")
            .env_remove("COHORT_AGENT_NAME")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start cohort-agent"),
    )
}

async fn list(client: &mut GpuServiceClient<Channel>) -> Vec<v1::Gpu> {
    client
        .list_gpus(v1::ListGpusRequest::default())
        .await
        .unwrap()
        .into_inner()
        .gpus
}

/// Polls ListGpus until `ready` holds, failing after [`WAIT`].
async fn wait_for<F>(client: &mut GpuServiceClient<Channel>, what: &str, ready: F) -> Vec<v1::Gpu>
where
    F: Fn(&[v1::Gpu]) -> bool,
{
    let ready = &ready;
    cohort_testkit::eventually(what, WAIT, || {
        let mut client = client.clone();
        async move {
            let gpus = list(&mut client).await;
            if ready(&gpus) {
                Ok(gpus)
            } else {
                Err(format!("last ListGpus: {gpus:#?}"))
            }
        }
    })
    .await
}

fn uuid(g: &v1::Gpu) -> String {
    g.info.as_ref().unwrap().uuid.clone()
}

fn find<'a>(gpus: &'a [v1::Gpu], agent: &str, index: i32) -> &'a v1::Gpu {
    gpus.iter()
        .find(|g| g.agent_name == agent && g.info.as_ref().unwrap().index == index)
        .unwrap_or_else(|| panic!("no GPU {index} on {agent}"))
}

fn config() -> v1::TrainingConfig {
    let text = "[model]\nd_in = 64\nd_sae = 512\n[optim]\nbatch_size = 256\nsteps = 5\n\
                [data.synthetic]\nnum_samples = 1000\n";
    (&cohort_spec::TrainingConfig::from_toml(text).unwrap()).into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recommend_packs_hosts_and_validate_names_every_problem() {
    let bin = agent_binary();
    let db = common::sqlite().await;
    let ctx = Context::new(db.db.clone());
    let fleet = ctx.fleet.clone();
    let server = common::server::TestServer::start(ctx).await;
    let url = server.url.clone();

    let dir = tempfile::tempdir().unwrap();
    let overrides = dir.path().join("overrides-b");
    std::fs::write(&overrides, "").unwrap();
    let empty = dir.path().join("overrides-none");
    std::fs::write(&empty, "").unwrap();
    let _agents: Vec<Reaped> = [
        ("host-a", &empty),
        ("host-b", &overrides),
        ("host-c", &empty),
    ]
    .into_iter()
    .map(|(name, o)| start_agent(&bin, &url, name, dir.path(), o))
    .collect();

    let mut client = GpuServiceClient::new(cohort_proto::channel(&url).await.unwrap());
    let gpus = wait_for(&mut client, "6 GPUs with samples", |gpus| {
        gpus.len() == 6 && gpus.iter().all(|g| g.latest_sample.is_some())
    })
    .await;
    assert!(gpus
        .iter()
        .all(|g| g.availability == v1::GpuAvailability::Available as i32));

    // All free: 4 GPUs on 2 hosts, not 3.
    let r = client
        .recommend_gpus(v1::RecommendGpusRequest {
            need: Some(v1::recommend_gpus_request::Need::MemoryBytes(GIB)),
            count: 4,
            single_host: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.gpus.len(), 4, "{r:#?}");
    let hosts: HashSet<&str> = r.gpus.iter().map(|g| g.agent_name.as_str()).collect();
    assert_eq!(hosts.len(), 2, "{hosts:?}");
    assert!(r.rejected.is_empty() && r.shortfall_reason.is_empty());

    // A process cohort doesn't own takes GPU 1 of host-b.
    let intruder = Reaped(
        Command::new("sleep")
            .arg("120")
            .spawn()
            .expect("start sleep"),
    );
    let pid = intruder.0.id();
    std::fs::write(&overrides, format!("1 foreign_pid {pid}\n")).unwrap();
    let note = format!("used by pid {pid} (sleep, not a cohort rank)");
    let gpus = wait_for(&mut client, "host-b GPU 1 busy", |gpus| {
        gpus.iter().any(|g| {
            g.agent_name == "host-b"
                && g.availability == v1::GpuAvailability::Busy as i32
                && g.health_notes.contains(&note)
        })
    })
    .await;
    let b1 = find(&gpus, "host-b", 1);
    assert!(b1.training_id.is_empty(), "busy without a training");
    let process = &b1.latest_sample.as_ref().unwrap().processes[0];
    assert_eq!((process.pid, process.name.as_str()), (pid, "sleep"));
    assert!(!process.cohort_rank);
    assert_eq!(
        find(&gpus, "host-b", 0).availability,
        v1::GpuAvailability::Available as i32
    );
    // The scheduler skips it too.
    let free: HashSet<String> = fleet.free_gpus().into_iter().map(|g| g.uuid).collect();
    assert_eq!(free.len(), 5);
    assert!(!free.contains(&uuid(b1)));

    // 4 GPUs still take 2 hosts: the two with both GPUs free; b's busy GPU is explained.
    let r = client
        .recommend_gpus(v1::RecommendGpusRequest {
            need: Some(v1::recommend_gpus_request::Need::Config(config())),
            count: 4,
            single_host: false,
        })
        .await
        .unwrap()
        .into_inner();
    let hosts: HashSet<&str> = r.gpus.iter().map(|g| g.agent_name.as_str()).collect();
    assert_eq!(hosts, HashSet::from(["host-a", "host-c"]), "{r:#?}");
    assert_eq!(r.gpus.len(), 4);
    assert_eq!(
        r.gpus[0].agent_name, r.gpus[1].agent_name,
        "a host's GPUs are adjacent in rank order"
    );
    assert_eq!(r.rejected.len(), 1, "{:#?}", r.rejected);
    assert_eq!(r.rejected[0].gpu_id, uuid(b1));
    assert_eq!(r.rejected[0].reason, "GPU_BUSY");
    assert!(
        r.rejected[0].message.ends_with(&note),
        "{}",
        r.rejected[0].message
    );
    let estimate = r.estimate.expect("estimate of the config");
    assert!(estimate.total_bytes > 0);
    assert_eq!(estimate.parameter_count, 2 * 64 * 512 + 64 + 512);
    assert_eq!((r.per_rank_batch_size, r.global_batch_size), (256, 1024));

    // More memory than any GPU has: nothing, and every GPU explained.
    let r = client
        .recommend_gpus(v1::RecommendGpusRequest {
            need: Some(v1::recommend_gpus_request::Need::MemoryBytes(17 * GIB)),
            count: 2,
            single_host: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.gpus.is_empty());
    assert_eq!(r.rejected.len(), 6);
    let memory: Vec<&v1::GpuSelectionProblem> = r
        .rejected
        .iter()
        .filter(|p| p.reason == "INSUFFICIENT_MEMORY")
        .collect();
    assert_eq!(memory.len(), 5);
    assert!(
        memory[0].message.contains("needs 17.00 GiB per rank"),
        "{}",
        memory[0].message
    );
    assert!(
        r.shortfall_reason.starts_with(
            "asked for 2 GPUs, 0 are suitable; not suitable: 1 busy, 5 too little memory"
        ),
        "{}",
        r.shortfall_reason
    );

    // Validate: a duplicate, an unknown and a busy GPU, each named.
    let a0 = uuid(find(&gpus, "host-a", 0));
    let v = client
        .validate_gpu_selection(v1::ValidateGpuSelectionRequest {
            gpu_ids: vec![a0.clone(), "GPU-nope".into(), uuid(b1), a0.clone()],
            config: Some(config()),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!v.valid);
    let problems: Vec<(&str, &str)> = v
        .problems
        .iter()
        .map(|p| (p.gpu_id.as_str(), p.reason.as_str()))
        .collect();
    assert_eq!(
        problems,
        vec![
            ("GPU-nope", "GPU_NOT_FOUND"),
            (uuid(b1).as_str(), "GPU_BUSY"),
            (a0.as_str(), "INVALID_ARGUMENT"),
        ]
    );
    assert_eq!(v.problems[2].message, "listed twice: for rank 0 and rank 3");
    assert_eq!((v.per_rank_batch_size, v.global_batch_size), (256, 1024));
    assert!(v.estimate.is_some());

    // A good selection is valid.
    let ok = client
        .validate_gpu_selection(v1::ValidateGpuSelectionRequest {
            gpu_ids: vec![a0, uuid(find(&gpus, "host-b", 0))],
            config: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(ok.valid, "{ok:#?}");

    // The intruder leaves: the GPU is available again.
    std::fs::write(&overrides, "").unwrap();
    drop(intruder);
    wait_for(&mut client, "host-b GPU 1 available again", |gpus| {
        gpus.iter()
            .all(|g| g.availability == v1::GpuAvailability::Available as i32)
    })
    .await;
    assert_eq!(fleet.free_gpus().len(), 6);

    drop(_agents);
    server.stop().await;
}

#[tokio::test]
async fn estimate_memory_itemises_and_rejects_bad_configs() {
    let db = common::sqlite().await;
    let server = common::server::TestServer::start(Context::new(db.db.clone())).await;
    let url = server.url.clone();
    let mut client = GpuServiceClient::new(cohort_proto::channel(&url).await.unwrap());
    let e = client
        .estimate_memory(v1::EstimateMemoryRequest {
            config: Some(config()),
        })
        .await
        .unwrap()
        .into_inner();
    // d_in 64, d_sae 512, batch 256, 1000 samples, f32, device auto (GPU).
    let p = 2 * 64 * 512 + 64 + 512;
    assert_eq!(e.parameter_count, p);
    assert_eq!(e.parameters_bytes, p as u64 * 4);
    // Adam's m and v, and when each latent last fired.
    assert_eq!(e.optimizer_bytes, 2 * p as u64 * 4 + 512 * 8);
    assert_eq!(
        e.data_bytes,
        256 * 64 * 4,
        "one staged batch: data is streamed"
    );
    assert_eq!(e.overhead_bytes, 500 << 20);
    assert!(
        e.total_bytes > e.parameters_bytes + e.optimizer_bytes + e.data_bytes + e.overhead_bytes
    );

    let mut bad = config();
    bad.optim.as_mut().unwrap().batch_size = 0;
    let err = client
        .estimate_memory(v1::EstimateMemoryRequest { config: Some(bad) })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        cohort_proto::error::reason_of(&err),
        Some(cohort_proto::error::Reason::InvalidConfig)
    );
    assert_eq!(
        cohort_proto::error::bad_fields(&err),
        vec!["config.optim.batch_size".to_string()]
    );
    let err = client
        .estimate_memory(v1::EstimateMemoryRequest { config: None })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);

    // A program's estimate is what it declares per rank, and the selection
    // RPCs check GPUs against it.
    let program = v1::TrainingConfig {
        program: Some(v1::ProgramConfig {
            command: vec!["/usr/bin/python3".into(), "train.py".into()],
            working_dir: "/opt/team".into(),
            memory_gib_per_rank: 20.0,
            ..Default::default()
        }),
        ..Default::default()
    };
    let e = client
        .estimate_memory(v1::EstimateMemoryRequest {
            config: Some(program.clone()),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((e.total_bytes, e.parameter_count), (20 * GIB, 0));
    let r = client
        .recommend_gpus(v1::RecommendGpusRequest {
            count: 1,
            need: Some(v1::recommend_gpus_request::Need::Config(program)),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.estimate.map(|e| e.total_bytes), Some(20 * GIB));
    assert_eq!(r.global_batch_size, 0, "a program's batch is its own");

    server.stop().await;
}
