//! A program that carries its code (`[program] code`): the CLI packs the
//! directory (honouring .cohortignore) and uploads it once; every agent
//! fetches the snapshot by hash and runs the program from it, read-only,
//! with no --program-root; bad directories and bad uploads are refused
//! with a reason and leave nothing stored.

use cohort_integration_tests::program::landlock;
use cohort_integration_tests::status::expect_error;
use cohort_integration_tests::{Backend, Cluster, ClusterOptions};
use cohort_proto::error::Reason;
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use cohort_proto::v1::upload_code_request::Part;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tonic::Code;

/// What each rank checks and says about the snapshot it runs from.
const TRAIN: &str = r#"
import os, sys
root = os.path.dirname(os.path.abspath(__file__))
print("CWD-IS-ROOT", os.getcwd() == root, flush=True)
print("DATA", open(os.path.join("data", "words.txt")).read().strip(), flush=True)
print("IGNORED-PRESENT", os.path.exists(os.path.join(root, "big.bin")), flush=True)
print("ARG", sys.argv[1], flush=True)
try:
    with open(os.path.join(root, "new.txt"), "w") as f:
        f.write("x")
    print("WROTE-SNAPSHOT", flush=True)
except OSError:
    print("DENIED-WRITE-SNAPSHOT", flush=True)
print("ROOT", root, flush=True)
"#;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `proj/job.toml` with `proj/src/` (a git work tree, then made dirty):
/// train.py, data/words.txt, and a 2 MiB big.bin the .cohortignore leaves out.
fn project(base: &Path) -> (PathBuf, String) {
    let src = base.join("proj/src");
    std::fs::create_dir_all(src.join("data")).unwrap();
    std::fs::write(src.join("train.py"), TRAIN).unwrap();
    std::fs::write(src.join("data/words.txt"), "hello from the snapshot\n").unwrap();
    std::fs::write(src.join(".cohortignore"), "big.bin\n").unwrap();
    std::fs::write(src.join("big.bin"), vec![7u8; 2 << 20]).unwrap();
    let proj = base.join("proj");
    git(&proj, &["init", "-q"]);
    git(&proj, &["add", "-A"]);
    git(&proj, &["commit", "-q", "-m", "first"]);
    let head = git(&proj, &["rev-parse", "HEAD"]);
    std::fs::write(src.join("notes.txt"), "not committed\n").unwrap();
    (job_file(&proj, &["train.py", "data/words.txt"]), head)
}

/// `dir/job.toml`: the project venv's python running `args` from the
/// code in `dir/src`.
fn job_file(dir: &Path, args: &[&str]) -> PathBuf {
    let python = cohort_testkit::python().display().to_string();
    let command: Vec<String> = std::iter::once(python.as_str())
        .chain(args.iter().copied())
        .map(|a| format!("{a:?}"))
        .collect();
    let job = dir.join("job.toml");
    let text = format!(
        "[program]\ncommand = [{}]\ncode = \"src\"\nmemory_gib_per_rank = 1\n",
        command.join(", ")
    );
    std::fs::write(&job, text).unwrap();
    job
}

/// The archives the coordinator keeps.
fn stored(cluster: &Cluster) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(cluster.data_dir().join("code"))
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Two agents of one GPU each and no --program-root.
fn options() -> ClusterOptions {
    let mut options = ClusterOptions::new(Backend::Sqlite, 2);
    options.gpus_per_agent = 1;
    if !landlock() {
        eprintln!(
            "NOTE: this kernel has no Landlock: programs run unconfined (--program-sandbox none)"
        );
        options.agent_args = vec!["--program-sandbox".into(), "none".into()];
    }
    options
}

async fn cluster() -> Cluster {
    Cluster::start(options()).await
}

/// With --code-storage s3://...: the snapshot is kept in the bucket (not
/// the data dir) and the agents' fetches read it from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_kept_in_object_storage() {
    let s3 = cohort_integration_tests::s3::S3Server::start();
    let empty = tempfile::tempdir().unwrap();
    s3.upload_dir(empty.path(), "code", "snapshots");
    let base = tempfile::tempdir().unwrap();
    let (job, _) = project(base.path());
    let mut options = options();
    options.env = s3.env();
    options.coordinator_args = vec!["--code-storage".into(), "s3://code/snapshots".into()];
    let cluster = Cluster::start(options).await;
    let job = job.display().to_string();
    let id = cluster
        .cli_ok(&["train", "submit", "--config", &job, "--gpus", "2", "-q"])
        .await;
    let t = cluster
        .wait_state(id.trim(), State::Succeeded, Duration::from_secs(180))
        .await;
    let sha256 = t.config.unwrap().program.unwrap().code.unwrap().sha256;
    assert!(stored(&cluster).is_empty(), "nothing in the data dir");
    let held = cluster
        .training()
        .await
        .get_code(v1::GetCodeRequest {
            sha256: sha256.clone(),
        })
        .await
        .expect("GetCode finds it in the bucket")
        .into_inner();
    assert!(held.size_bytes > 0);
    for agent in 0..2 {
        let root = cluster.agent_work_dir(agent).join("code").join(&sha256);
        assert!(root.join("train.py").is_file(), "{}", root.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_travels_with_the_training_to_every_rank() {
    let base = tempfile::tempdir().unwrap();
    let (job, head) = project(base.path());
    let cluster = cluster().await;
    let job = job.display().to_string();
    let out = cluster
        .cli(&["train", "submit", "--config", &job, "--gpus", "2", "-q"])
        .await;
    assert!(out.status.success(), "{out:?}");
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let t = cluster
        .wait_state(&id, State::Succeeded, Duration::from_secs(180))
        .await;
    let code = t
        .config
        .unwrap()
        .program
        .unwrap()
        .code
        .expect("the snapshot");
    assert_eq!(code.sha256.len(), 64);
    assert_eq!(code.git_commit.as_deref(), Some(head.as_str()));
    assert!(code.git_dirty, "notes.txt is not committed");
    assert_eq!(
        code.files, 4,
        "train.py, data/words.txt, .cohortignore, notes.txt"
    );
    assert_eq!(stored(&cluster), [format!("{}.tar.gz", code.sha256)]);

    // Both ranks, each on its own agent, ran the snapshot's files.
    let logs = cluster.cli_ok(&["logs", &id]).await;
    for rank in 0..2 {
        for line in [
            "CWD-IS-ROOT True",
            "DATA hello from the snapshot",
            "IGNORED-PRESENT False",
        ] {
            assert!(
                logs.contains(&format!("[rank {rank}] {line}")),
                "{line}:\n{logs}"
            );
        }
        if landlock() {
            assert!(
                logs.contains(&format!("[rank {rank}] DENIED-WRITE-SNAPSHOT")),
                "{logs}"
            );
        }
    }
    for agent in 0..2 {
        let root = cluster
            .agent_work_dir(agent)
            .join("code")
            .join(&code.sha256);
        assert!(root.join("train.py").is_file(), "{}", root.display());
        assert!(!root.join("big.bin").exists());
        let arg = format!("ARG {}", root.join("data/words.txt").display());
        assert!(
            logs.contains(&arg),
            "the relative argument resolves in the snapshot: {arg}\n{logs}"
        );
    }
    let shown = cluster.cli_ok(&["train", "get", &id]).await;
    let short = format!("sha256:{} (4 files", &code.sha256[..12]);
    assert!(
        shown
            .lines()
            .any(|l| l.trim_start().starts_with("code") && l.contains(&short)),
        "{short:?} in:\n{shown}"
    );
    assert!(
        shown.contains(&format!("git {} (dirty)", &head[..10])),
        "{shown}"
    );

    let report = cluster.cli_ok(&["train", "report", &id]).await;
    assert!(report.contains(&format!("code {short}")), "{report}");

    // The same code again is not uploaded again.
    let again = cluster
        .cli(&["train", "submit", "--config", &job, "--gpus", "1"])
        .await;
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(
        again.status.success() && said.contains("already on the coordinator"),
        "{again:?}"
    );
    assert_eq!(stored(&cluster).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_code_is_refused_and_nothing_is_stored() {
    let base = tempfile::tempdir().unwrap();
    let (job, _) = project(base.path());
    let proj = job.parent().unwrap().to_path_buf();
    let cluster = cluster().await;
    let refused = |out: std::process::Output, needle: &str| {
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(4), "{needle}: {out:?}");
        assert!(err.contains(needle), "{needle:?} in {err}");
    };
    let rewrite = |code: &str| {
        let text = std::fs::read_to_string(&job).unwrap();
        let text = text.replace("code = \"src\"", &format!("code = {code:?}"));
        let other = proj.join(format!("job-{}.toml", code.len()));
        std::fs::write(&other, text).unwrap();
        other.display().to_string()
    };
    // A directory outside the config's tree.
    std::fs::create_dir_all(base.path().join("elsewhere")).unwrap();
    let outside = rewrite("../elsewhere");
    refused(
        cluster
            .cli(&["train", "submit", "--config", &outside])
            .await,
        "outside the config file's directory",
    );
    // A link leaving the directory.
    std::os::unix::fs::symlink("/etc", proj.join("src/etc")).unwrap();
    let job_s = job.display().to_string();
    refused(
        cluster.cli(&["train", "submit", "--config", &job_s]).await,
        "CODE_SYMLINK_LEAVES",
    );
    std::fs::remove_file(proj.join("src/etc")).unwrap();
    // Over the cap: the message names the largest file.
    std::fs::remove_file(proj.join("src/.cohortignore")).unwrap();
    let out = cluster
        .cli(&["train", "submit", "--config", &job_s, "--code-max-mib", "1"])
        .await;
    refused(out, "big.bin");
    assert!(stored(&cluster).is_empty(), "{:?}", stored(&cluster));

    // Bytes that are not what the header says.
    let mut client = cluster.training().await;
    let part = |p: Part| v1::UploadCodeRequest { part: Some(p) };
    let lie = vec![
        part(Part::Header(v1::CodeHeader {
            sha256: "0".repeat(64),
            size_bytes: 5,
        })),
        part(Part::Data(b"hello".to_vec())),
    ];
    expect_error(
        "UploadCode with the wrong sha256",
        client.upload_code(tokio_stream::iter(lie)).await,
        Code::InvalidArgument,
        Reason::CodeDigestMismatch,
    );
    let big = vec![part(Part::Header(v1::CodeHeader {
        sha256: "1".repeat(64),
        size_bytes: 65 << 20,
    }))];
    expect_error(
        "UploadCode over --code-max-mib",
        client.upload_code(tokio_stream::iter(big)).await,
        Code::ResourceExhausted,
        Reason::CodeTooLarge,
    );
    let unknown = v1::GetCodeRequest {
        sha256: "2".repeat(64),
    };
    expect_error(
        "GetCode of an unknown snapshot",
        client.get_code(unknown).await,
        Code::NotFound,
        Reason::CodeNotFound,
    );
    // A training naming code never uploaded.
    let text = std::fs::read_to_string(&job).unwrap().replace(
        "code = \"src\"",
        &format!(
            "code = {{ sha256 = \"{}\", size_bytes = 10 }}",
            "3".repeat(64)
        ),
    );
    let config = cohort_spec::Workload::from_toml(&text).unwrap();
    let request = v1::CreateTrainingRequest {
        config: Some((&config).into()),
        gpus: Some(v1::GpuRequest {
            selection: Some(v1::gpu_request::Selection::Count(1)),
            ..Default::default()
        }),
        ..Default::default()
    };
    expect_error(
        "CreateTraining of code never uploaded",
        client.create_training(request).await,
        Code::FailedPrecondition,
        Reason::CodeNotFound,
    );
    assert!(stored(&cluster).is_empty());
    cohort_testkit::eventually(
        "the staging dir to be empty",
        Duration::from_secs(10),
        || async {
            let left = std::fs::read_dir(cluster.data_dir().join("code-staging"))
                .map(|d| d.count())
                .unwrap_or(0);
            if left == 0 {
                Ok(())
            } else {
                Err(format!("{left} files"))
            }
        },
    )
    .await;
}

/// Every attempt, on every host, runs the snapshot that was submitted,
/// whatever happens to the directory afterwards: attempt 1 fails (exit 1,
/// a restart), attempt 2 succeeds, and both read the submitted version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attempt_runs_the_submitted_snapshot() {
    let base = tempfile::tempdir().unwrap();
    let src = base.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("train.py"),
        // Attempt 1 waits before failing: the first rank to fail stops the
        // gang, and the other must have printed by then.
        "import os, sys, time\nattempt = os.environ['COHORT_ATTEMPT']\n\
         print('VERSION', open('version.txt').read().strip(), 'ATTEMPT', attempt, flush=True)\n\
         if attempt == '1':\n    time.sleep(3)\n    sys.exit(1)\n",
    )
    .unwrap();
    std::fs::write(src.join("version.txt"), "v1\n").unwrap();
    let job = job_file(base.path(), &["train.py"]);
    let cluster = cluster().await;
    let job = job.display().to_string();
    let id = cluster
        .cli_ok(&["train", "submit", "--config", &job, "--gpus", "2", "-q"])
        .await;
    let id = id.trim();
    // The directory changes once submitted: no attempt sees it.
    std::fs::write(src.join("version.txt"), "v2\n").unwrap();
    let t = cluster
        .wait_state(id, State::Succeeded, Duration::from_secs(180))
        .await;
    assert_eq!((t.attempt, t.restart_count), (2, 1));
    for attempt in ["1", "2"] {
        let logs = cluster.cli_ok(&["logs", id, "--attempt", attempt]).await;
        for rank in 0..2 {
            let line = format!("[rank {rank}] VERSION v1 ATTEMPT {attempt}");
            assert!(logs.contains(&line), "{line:?} in:\n{logs}");
        }
    }
}

/// Through a standby (PostgreSQL, two coordinators): GetCode, the upload's
/// client stream and the create are forwarded to the leader, which keeps
/// the snapshot and hands it to the agents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_submitted_through_a_standby() {
    let mut options = options();
    options.backend = Backend::Postgres;
    options.agents = 1;
    options.defer_agents = true;
    let mut cluster = Cluster::start(options).await;
    cluster.start_peer().await;
    cluster.start_agents().await;
    let base = tempfile::tempdir().unwrap();
    let (job, _) = project(base.path());
    let job = job.display().to_string();
    let standby = cluster.coordinator_url(1);
    let out = cluster
        .cli_at(
            &standby,
            &["train", "submit", "--config", &job, "--gpus", "1", "-q"],
        )
        .await;
    assert!(out.status.success(), "{out:?}");
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let t = cluster
        .wait_state(&id, State::Succeeded, Duration::from_secs(180))
        .await;
    let sha256 = t.config.unwrap().program.unwrap().code.unwrap().sha256;
    assert_eq!(
        stored(&cluster),
        [format!("{sha256}.tar.gz")],
        "on the leader"
    );
}
