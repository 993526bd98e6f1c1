//! `runtime.nccl_env`: a training's NCCL variables reach its ranks'
//! environment (read from the running rank processes' /proc/<pid>/environ),
//! over the agent's own; a name outside the allowlist is refused at create
//! with the field named, and nothing is created.

use cohort_integration_tests::job::create_request;
use cohort_integration_tests::status::expect_error;
use cohort_integration_tests::{Backend, Cluster, ClusterOptions, SaeJob};
use cohort_proto::v1;
use cohort_testkit::eventually;
use std::time::Duration;
use tonic::Code;

fn environ(pid: u32) -> Result<Vec<String>, String> {
    let raw =
        std::fs::read(format!("/proc/{pid}/environ")).map_err(|e| format!("pid {pid}: {e}"))?;
    Ok(raw
        .split(|b| *b == 0)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trainings_nccl_variables_reach_its_ranks() {
    let mut options = ClusterOptions::new(Backend::Sqlite, 1);
    // The agent's own value, which the training's overrides.
    options.env = vec![("NCCL_DEBUG".into(), "WARN".into())];
    let cluster = Cluster::start(options).await;
    let job = SaeJob {
        tables: "nccl_env = { NCCL_DEBUG = \"INFO\", NCCL_SOCKET_IFNAME = \"lo\" }\n".into(),
        ..SaeJob::with_steps(20_000)
    };
    let mut client = cluster.training().await;
    let id = client
        .create_training(create_request(&job, 2, true))
        .await
        .expect("create")
        .into_inner()
        .id;
    let envs = eventually(
        "both ranks running with their environment",
        Duration::from_secs(60),
        || async {
            let t = cluster.get_training(&id).await;
            let pids: Vec<u32> = t.ranks.iter().map(|r| r.pid).filter(|p| *p > 0).collect();
            if pids.len() < 2 {
                return Err(format!("{:?}", t.ranks));
            }
            pids.into_iter().map(environ).collect::<Result<Vec<_>, _>>()
        },
    )
    .await;
    for env in &envs {
        assert!(env.contains(&"NCCL_DEBUG=INFO".to_string()), "{env:?}");
        assert!(
            env.contains(&"NCCL_SOCKET_IFNAME=lo".to_string()),
            "{env:?}"
        );
        assert!(!env.contains(&"NCCL_DEBUG=WARN".to_string()), "{env:?}");
    }
    client
        .cancel_training(v1::CancelTrainingRequest {
            id,
            reason: "test over".into(),
        })
        .await
        .expect("cancel");

    // A variable outside the allowlist: refused by name, nothing created.
    let before = cluster.cli_ok(&["-o", "json", "train", "list"]).await;
    let mut bad = create_request(&SaeJob::small(), 1, true);
    let runtime = bad
        .config
        .as_mut()
        .and_then(|c| c.runtime.as_mut())
        .expect("a runtime section");
    runtime
        .nccl_env
        .insert("NCCL_NET_PLUGIN".into(), "/tmp/x.so".into());
    let status = expect_error(
        "an NCCL variable outside the allowlist",
        client.create_training(bad).await,
        Code::InvalidArgument,
        cohort_proto::error::Reason::InvalidConfig,
    );
    assert!(
        cohort_proto::error::bad_fields(&status)
            .contains(&"config.runtime.nccl_env.NCCL_NET_PLUGIN".to_string()),
        "{status:?}"
    );
    assert_eq!(
        cluster
            .cli_ok(&["-o", "json", "train", "list"])
            .await
            .matches("\"id\"")
            .count(),
        before.matches("\"id\"").count()
    );
}
