//! A real S3-protocol server for tests: moto's standalone server on
//! 127.0.0.1 (from the project venv, installed by scripts/setup.sh), and
//! shards written by numpy/safetensors/pyarrow and uploaded with boto3
//! (agent/rank/tests/make_shards.py).

pub use cohort_testkit::S3Server;

use crate::bins::workspace_root;
use cohort_testkit::python;
use std::path::{Path, PathBuf};
use std::process::Command;

fn make_shards(args: &[&str], env: &[(String, String)]) {
    let out = Command::new(python())
        .arg(workspace_root().join("agent/rank/tests/make_shards.py"))
        .args(args)
        .envs(env.iter().cloned())
        .output()
        .expect("run make_shards.py");
    assert!(
        out.status.success(),
        "make_shards.py {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writes the mixed test shards (900 rows of `d_in`) under `dir/shards`.
pub fn write_mixed_shards(dir: &Path, d_in: i64) -> PathBuf {
    make_shards(
        &["mixed", &dir.display().to_string(), &d_in.to_string(), "1"],
        &[],
    );
    dir.join("shards")
}

/// integration-tests/check_export.py over the two downloads.
pub fn check_export(native: &Path, saelens: &Path) {
    let root = workspace_root();
    let out = Command::new(python())
        .arg(root.join("integration-tests/check_export.py"))
        .arg(native)
        .arg(saelens)
        .output()
        .expect("run check_export.py");
    assert!(
        out.status.success(),
        "check_export.py: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
