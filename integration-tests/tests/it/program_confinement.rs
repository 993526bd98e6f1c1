//! A program under the agent's Landlock sandbox and clean environment:
//! what it may read and write, and what it is denied.

use cohort_integration_tests::program::*;
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use std::time::Duration;

/// What a confined program can and cannot touch: it reads its own root and
/// writes its run dir, TMPDIR and checkpoint dir; the shared /tmp, a file
/// beside the agent's work dir and the agent's home answer EACCES.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_is_denied_what_lies_outside_its_roots() {
    if !landlock() {
        eprintln!("SKIPPED: this kernel has no Landlock, so programs cannot be confined here");
        return;
    }
    let probe_root = tempfile::tempdir().unwrap();
    let script = probe_root.path().join("probe.py");
    std::fs::write(&script, PROBE).unwrap();
    let cluster = cluster_with_roots(&[probe_root.path()]).await;
    let secret = cluster.root().join("secret.txt");
    std::fs::write(&secret, "not for programs").unwrap();
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let mut request = torch_ddp(&[], 1);
    let program = request.config.as_mut().unwrap().program.as_mut().unwrap();
    program.command = vec![
        cohort_testkit::python().display().to_string(),
        script.display().to_string(),
        script.display().to_string(),
        secret.display().to_string(),
        format!("{home}/.profile"),
    ];
    program.working_dir = probe_root.path().display().to_string();
    request.gpus.as_mut().unwrap().selection = Some(v1::gpu_request::Selection::Count(1));
    let id = cluster.create(request).await;
    cluster
        .wait_state(&id, State::Succeeded, Duration::from_secs(120))
        .await;
    let out = cluster.cli_ok(&["logs", &id]).await;
    let said = |line: String| {
        assert!(
            out.lines().any(|l| l == format!("[rank 0] {line}")),
            "{line:?} not in:\n{out}"
        );
    };
    said(format!("READ {}", script.display()));
    said(format!("DENIED {}", secret.display()));
    if std::path::Path::new(&format!("{home}/.profile")).exists() {
        said(format!("DENIED {home}/.profile"));
    }
    said("DENIED-WRITE /tmp".into());
    said("WROTE TMPDIR".into());
    said("WROTE HOME".into());
    said("WROTE COHORT_CHECKPOINT_DIR".into());
    // The agent's own environment (it inherits cargo's) is not the program's.
    said("NO CARGO_PKG_NAME".into());
}

/// Reads each path it is given, then tries to write in a few places.
const PROBE: &str = r#"
import os, sys
for path in sys.argv[1:]:
    try:
        with open(path) as f:
            f.read()
        print(f"READ {path}")
    except PermissionError:
        print(f"DENIED {path}")
    except FileNotFoundError:
        print(f"MISSING {path}")
try:
    with open("/tmp/cohort-probe-" + os.environ["COHORT_TRAINING_ID"], "w") as f:
        f.write("x")
    print("WROTE /tmp")
except PermissionError:
    print("DENIED-WRITE /tmp")
for var in ["TMPDIR", "HOME", "COHORT_CHECKPOINT_DIR"]:
    with open(os.path.join(os.environ[var], "probe"), "w") as f:
        f.write("x")
    print(f"WROTE {var}")
print("NO CARGO_PKG_NAME" if "CARGO_PKG_NAME" not in os.environ else "HAS CARGO_PKG_NAME")
"#;
