//! A rank started by an agent never outlives it.

mod common;

use common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn alive(pid: i32) -> bool {
    let exists = unsafe { libc::kill(pid, 0) } == 0;
    exists
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| s.split_whitespace().nth(2) == Some("Z"))
            .unwrap_or(true)
}

#[test]
fn a_rank_exits_when_its_parent_dies() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "sae.toml", &config(32, 1_000_000, 0));
    let pid_file = dir.path().join("rank.pid");
    // a stand-in agent: a shell that starts the rank, records its pid, and waits
    let script = format!(
        "{BIN} --config {} --run-dir {} >/dev/null 2>&1 & echo $! > {}; wait",
        cfg.display(),
        dir.path().join("run").display(),
        pid_file.display()
    );
    let mut parent = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .env("COHORT_EXIT_WITH_PARENT", "1")
        .env("WORLD_SIZE", "1")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let rank: i32 = loop {
        if let Some(pid) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            break pid;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the rank never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_secs(2));
    assert!(alive(rank), "the rank runs while its parent lives");
    parent.kill().unwrap();
    parent.wait().unwrap();
    let killed = Instant::now();
    while alive(rank) {
        if killed.elapsed() > Duration::from_secs(10) {
            unsafe { libc::kill(rank, libc::SIGKILL) };
            panic!("the rank outlived its parent by 10 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
