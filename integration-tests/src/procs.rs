//! Child processes in their own process groups, and leftover rank processes.

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The environment variable every process a test starts carries (agents pass
/// it on to their ranks): it tells this test's processes from everyone else's.
pub const MARK_VAR: &str = "COHORT_TEST_MARK";

/// Writes `<dir>/rank.env`: the agent's `--rank-env-file`, since ranks no
/// longer inherit the agent's environment. It carries the mark (so ranks
/// can be found) and `vars` (the S3 credentials of the tests that use
/// object storage). Returns the flag and its value.
pub fn rank_env_file(dir: &Path, mark: &str, vars: &[(String, String)]) -> [String; 2] {
    let path = dir.join("rank.env");
    let mut text = format!("{MARK_VAR}={mark}\n");
    for (k, v) in vars {
        text.push_str(&format!("{k}={v}\n"));
    }
    std::fs::write(&path, text).expect("write rank.env");
    ["--rank-env-file".to_string(), path.display().to_string()]
}

/// A child process leading its own process group, its stdout and stderr in a
/// log file. Dropping it SIGKILLs the group.
#[derive(Debug)]
pub struct ChildProc {
    pub name: String,
    pub log: PathBuf,
    child: Child,
    exited: Option<ExitStatus>,
}

impl ChildProc {
    /// Spawns `command` as `name`, appending its output to `log`.
    pub fn spawn(name: &str, mut command: Command, log: &Path) -> ChildProc {
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .unwrap_or_else(|e| panic!("opening {}: {e}", log.display()));
        let err = out.try_clone().expect("cloning the log file handle");
        command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name} ({command:?}): {e}"));
        ChildProc {
            name: name.to_string(),
            log: log.to_path_buf(),
            child,
            exited: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status, if it has exited (reaps it).
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
        }
        self.exited
    }

    /// Sends `signal` to the whole process group (no-op once reaped).
    pub fn signal_group(&mut self, signal: Signal) {
        if self.try_exit().is_none() {
            let _ = killpg(Pid::from_raw(self.pid() as i32), signal);
        }
    }

    /// Waits up to `timeout` for the process to exit.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_exit() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILLs the group and reaps the leader.
    pub fn kill(&mut self) {
        if self.try_exit().is_none() {
            let _ = killpg(Pid::from_raw(self.pid() as i32), Signal::SIGKILL);
            self.exited = self.child.wait().ok();
        }
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last `lines` lines of a file ("" when unreadable).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Live (not zombie) `cohort-rank` processes carrying `MARK_VAR=mark`.
pub fn rank_processes(mark: &str) -> Vec<i32> {
    marked_processes(mark, "cohort-rank")
}

/// Live (not zombie) processes of a program whose name starts with
/// `program`, carrying `MARK_VAR=mark`.
pub fn marked_processes(mark: &str, program: &str) -> Vec<i32> {
    let needle = format!("{MARK_VAR}={mark}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let dir = entry.path();
        // A zombie's environ and cmdline read as empty: it is not counted.
        let Ok(environ) = std::fs::read(dir.join("environ")) else {
            continue;
        };
        if !environ
            .split(|&b| b == 0)
            .any(|var| var == needle.as_bytes())
        {
            continue;
        }
        let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
        let argv0 = cmdline.split(|&b| b == 0).next().unwrap_or_default();
        let argv0 = String::from_utf8_lossy(argv0);
        if Path::new(argv0.as_ref())
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(program))
        {
            pids.push(pid);
        }
    }
    pids.sort_unstable();
    pids
}

/// SIGKILLs the process groups of `pids` (rank processes lead their own group).
pub fn kill_groups(pids: &[i32]) {
    for &pid in pids {
        let pgid = nix::unistd::getpgid(Some(Pid::from_raw(pid))).unwrap_or(Pid::from_raw(pid));
        let _ = killpg(pgid, Signal::SIGKILL);
    }
}

/// Runs `command` to its end within `timeout`, panicking with `what` if it
/// cannot start or takes longer: its output.
pub async fn output_within(
    command: &mut tokio::process::Command,
    timeout: Duration,
    what: &str,
) -> std::process::Output {
    command.kill_on_drop(true);
    match tokio::time::timeout(timeout, command.output()).await {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => panic!("running {what}: {e}"),
        Err(_) => panic!("{what} did not finish within {timeout:?}"),
    }
}
