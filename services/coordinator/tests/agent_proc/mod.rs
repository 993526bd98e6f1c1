//! A real `cohort-agent` process with simulated GPUs, for tests that need
//! one. The binary is built on first use (`cargo build -p cohort-agent` into
//! the target directory this test runs from; a no-op when fresh).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

/// `<target>/debug`: test executables are `<profile>/deps/<name>-<hash>`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe.parent().expect("has a directory");
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().expect("deps has a parent").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// The agent binary, built once per test process.
pub fn agent_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let profile = profile_dir();
        let target = profile.parent().expect("profile has a target dir");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-p", "cohort-agent", "--target-dir"])
            .arg(target)
            .status()
            .expect("run cargo build -p cohort-agent");
        assert!(status.success(), "cargo build -p cohort-agent failed");
        let bin = profile.join("cohort-agent");
        assert!(bin.exists(), "{} missing after the build", bin.display());
        bin
    })
}

/// A running agent, killed when dropped.
pub struct Agent {
    child: Child,
}

impl Agent {
    /// `cohort-agent --simulate-gpus 1` against `coordinator` (`http://...`),
    /// its simulated values scripted by `overrides`.
    pub fn start(coordinator: &str, name: &str, overrides: &Path, work_dir: &Path) -> Self {
        let child = Command::new(agent_binary())
            .args(["--coordinator", coordinator, "--name", name])
            .args(["--simulate-gpus", "1", "--simulate-overrides"])
            .arg(overrides)
            .arg("--work-dir")
            .arg(work_dir)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start cohort-agent");
        Self { child }
    }

    /// Kills the agent (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
    }
}
