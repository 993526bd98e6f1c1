//! moto's standalone S3 server on 127.0.0.1 (from the project venv,
//! installed by scripts/setup.sh), killed on drop.

use super::port::PortLease;
use super::{python, venv_bin, workspace_root};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct S3Server {
    child: Child,
    pub endpoint: String,
}

impl S3Server {
    pub fn start() -> S3Server {
        let lease = PortLease::new();
        let port = lease.port();
        let mut command = Command::new(venv_bin("moto_server"));
        command
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        lease.release();
        let child = command
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
    /// ranks, the coordinator, the CLI, boto3) at this server.
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

    /// Uploads every file of `dir` (not recursive) to
    /// `s3://bucket/prefix/`, creating the bucket (an empty `dir` only
    /// creates it), with boto3 (agent/rank/tests/make_shards.py).
    pub fn upload_dir(&self, dir: &Path, bucket: &str, prefix: &str) {
        let out = Command::new(python())
            .arg(workspace_root().join("agent/rank/tests/make_shards.py"))
            .args(["upload", &dir.display().to_string(), bucket, prefix])
            .envs(self.env())
            .output()
            .expect("run make_shards.py upload");
        assert!(
            out.status.success(),
            "upload to s3://{bucket}/{prefix}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
