//! A real S3-protocol server for tests: moto's standalone server on
//! 127.0.0.1 (from the project venv, installed by scripts/setup.sh), and
//! shards written by numpy/safetensors/pyarrow and uploaded with boto3
//! (agent/rank/tests/make_shards.py).

use crate::bins::workspace_root;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn venv_bin(name: &str) -> PathBuf {
    workspace_root().join(".venv/bin").join(name)
}

fn make_shards(args: &[&str], env: &[(String, String)]) {
    let out = Command::new(venv_bin("python"))
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
    let out = std::process::Command::new(root.join(".venv/bin/python"))
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

/// moto_server, killed on drop.
pub struct S3Server {
    child: Child,
    pub endpoint: String,
}

impl S3Server {
    pub fn start() -> S3Server {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = listener.local_addr().expect("local addr").port();
        drop(listener);
        let child = Command::new(venv_bin("moto_server"))
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto_server (scripts/setup.sh installs it)");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "moto_server did not listen");
            std::thread::sleep(Duration::from_millis(100));
        }
        S3Server {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        }
    }

    /// The standard AWS variables that point a client (an agent and so its
    /// ranks, the coordinator, the CLI) at this server.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT_URL", self.endpoint.as_str()),
            ("AWS_ACCESS_KEY_ID", "cohort-test"),
            ("AWS_SECRET_ACCESS_KEY", "cohort-test"),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ALLOW_HTTP", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    /// Uploads every file of `dir` to `s3://bucket/prefix/`, creating the
    /// bucket (an empty `dir` only creates it).
    pub fn upload_dir(&self, dir: &Path, bucket: &str, prefix: &str) {
        make_shards(
            &["upload", &dir.display().to_string(), bucket, prefix],
            &self.env(),
        );
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
