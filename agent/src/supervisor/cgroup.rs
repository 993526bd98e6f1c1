//! A host-memory limit per rank, through the kernel's memory controller:
//! each rank starts inside its own cgroup (`memory.max` on cgroup v2,
//! `memory.limit_in_bytes` on v1), joined between fork and exec so nothing
//! it allocates escapes the limit. A rank the kernel kills at its limit is
//! reported as an out-of-memory exit (code 20). Not `RLIMIT_AS`: address
//! space is not memory, and CUDA and large shared libraries reserve far
//! more than they use. Where no writable memory controller exists the
//! agent says so once and ranks run unbounded.

use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};
use tokio::process::Command;

/// Which memory controller the agent can use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Memory {
    /// cgroup v2: ranks' cgroups under `base` (memory enabled for its children).
    V2 { base: PathBuf },
    /// cgroup v1: ranks' cgroups under `base` in the memory hierarchy.
    V1 { base: PathBuf },
    /// No writable memory controller: why.
    Unavailable(String),
}

/// The cgroup of one rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankCgroup {
    pub dir: PathBuf,
    pub limit_bytes: u64,
    v2: bool,
}

/// The cgroup path of this process in the hierarchy of `controller` ("" for
/// v2's unified line), from /proc/self/cgroup.
fn own_path(controller: &str) -> Option<String> {
    #[allow(clippy::disallowed_methods)] // once, before the runtime serves anything
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let found = if controller.is_empty() {
            controllers.is_empty()
        } else {
            controllers.split(',').any(|c| c == controller)
        };
        found.then(|| path.to_string())
    })
}

#[allow(clippy::disallowed_methods)] // set-up, before the runtime serves anything
fn v2(agent: &str) -> Result<PathBuf, String> {
    let root = Path::new("/sys/fs/cgroup");
    let controllers = std::fs::read_to_string(root.join("cgroup.controllers"))
        .map_err(|e| format!("no cgroup v2 hierarchy: {e}"))?;
    if !controllers.split_whitespace().any(|c| c == "memory") {
        return Err("cgroup v2 has no memory controller".into());
    }
    let own = own_path("").ok_or("this process is in no cgroup v2")?;
    let own = root.join(own.trim_start_matches('/'));
    // No process may live in a cgroup whose children get controllers: the
    // agent moves itself into a leaf of its own cgroup first.
    let leaf = own.join("agent");
    std::fs::create_dir_all(&leaf).map_err(|e| format!("{}: {e}", leaf.display()))?;
    std::fs::write(leaf.join("cgroup.procs"), std::process::id().to_string())
        .map_err(|e| format!("moving the agent into {}: {e}", leaf.display()))?;
    std::fs::write(own.join("cgroup.subtree_control"), "+memory")
        .map_err(|e| format!("enabling memory below {}: {e}", own.display()))?;
    let base = own.join(format!("cohort-ranks.{agent}"));
    std::fs::create_dir_all(&base).map_err(|e| format!("{}: {e}", base.display()))?;
    std::fs::write(base.join("cgroup.subtree_control"), "+memory")
        .map_err(|e| format!("enabling memory below {}: {e}", base.display()))?;
    Ok(base)
}

#[allow(clippy::disallowed_methods)] // set-up, before the runtime serves anything
fn v1(agent: &str) -> Result<PathBuf, String> {
    let root = Path::new("/sys/fs/cgroup/memory");
    if !root.join("memory.limit_in_bytes").exists() {
        return Err("no cgroup v1 memory hierarchy at /sys/fs/cgroup/memory".into());
    }
    let own = own_path("memory").unwrap_or_else(|| "/".into());
    let base = root
        .join(own.trim_start_matches('/'))
        .join(format!("cohort-ranks.{agent}"));
    std::fs::create_dir_all(&base).map_err(|e| format!("{}: {e}", base.display()))?;
    Ok(base)
}

static MEMORY: std::sync::OnceLock<Memory> = std::sync::OnceLock::new();

/// Finds the memory controller once, at start-up, for agent `agent`; says
/// what ranks will be bounded by.
pub fn init(agent: &str) -> &'static Memory {
    let memory = MEMORY.get_or_init(|| Memory::detect(agent));
    match memory {
        Memory::V2 { base } => {
            tracing::info!(cgroups = %base.display(), "ranks' host memory is bounded (cgroup v2 memory.max)")
        }
        Memory::V1 { base } => {
            tracing::info!(cgroups = %base.display(), "ranks' host memory is bounded (cgroup v1 memory.limit_in_bytes)")
        }
        Memory::Unavailable(why) => {
            tracing::warn!(%why, "no writable memory cgroup: ranks' host memory is not bounded")
        }
    }
    memory
}

/// The controller [`init`] found; unavailable when it was not called.
pub fn memory() -> &'static Memory {
    static NONE: std::sync::OnceLock<Memory> = std::sync::OnceLock::new();
    MEMORY
        .get()
        .unwrap_or_else(|| NONE.get_or_init(|| Memory::Unavailable("not set up".into())))
}

impl Memory {
    /// The controller this host offers the agent named `agent` (v2 first).
    pub fn detect(agent: &str) -> Memory {
        let agent: String = agent
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        match v2(&agent) {
            Ok(base) => Memory::V2 { base },
            Err(v2_why) => match v1(&agent) {
                Ok(base) => Memory::V1 { base },
                Err(v1_why) => Memory::Unavailable(format!("{v2_why}; {v1_why}")),
            },
        }
    }

    /// Creates the cgroup of one rank with its limit.
    pub async fn rank(&self, name: &str, limit_bytes: u64) -> io::Result<Option<RankCgroup>> {
        let (base, v2) = match self {
            Memory::V2 { base } => (base, true),
            Memory::V1 { base } => (base, false),
            Memory::Unavailable(_) => return Ok(None),
        };
        let dir = base.join(name);
        // A leftover of an earlier agent (same rank key): start clean.
        let _ = tokio::fs::remove_dir(&dir).await;
        tokio::fs::create_dir_all(&dir).await?;
        let (file, value) = if v2 {
            ("memory.max", limit_bytes.to_string())
        } else {
            ("memory.limit_in_bytes", limit_bytes.to_string())
        };
        tokio::fs::write(dir.join(file), value).await?;
        if v2 {
            // No swap past the limit either (where swap exists).
            let _ = tokio::fs::write(dir.join("memory.swap.max"), "0").await;
        }
        Ok(Some(RankCgroup {
            dir,
            limit_bytes,
            v2,
        }))
    }
}

impl RankCgroup {
    /// Makes the child join this cgroup between fork and exec.
    pub fn join_on_spawn(&self, command: &mut Command) -> io::Result<()> {
        let procs = CString::new(self.dir.join("cgroup.procs").as_os_str().as_encoded_bytes())
            .map_err(|_| io::Error::other("a cgroup path with a NUL byte"))?;
        // SAFETY: open, write, close and getpid are async-signal-safe; the
        // path was allocated before the fork and the digits go to a stack
        // buffer: nothing is allocated or locked in the child.
        unsafe {
            command.pre_exec(move || {
                let mut digits = [0u8; 20];
                let mut pid = libc::getpid() as u64;
                let mut at = digits.len();
                loop {
                    at -= 1;
                    digits[at] = b'0' + (pid % 10) as u8;
                    pid /= 10;
                    if pid == 0 {
                        break;
                    }
                }
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                let len = digits.len() - at;
                let wrote = libc::write(fd, digits[at..].as_ptr().cast(), len);
                libc::close(fd);
                if wrote != len as isize {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(())
    }

    /// Whether the kernel killed something in it for reaching its limit.
    pub async fn oom_killed(&self) -> bool {
        if self.v2 {
            let events = tokio::fs::read_to_string(self.dir.join("memory.events"))
                .await
                .unwrap_or_default();
            return counter(&events, "oom_kill") > 0;
        }
        let control = tokio::fs::read_to_string(self.dir.join("memory.oom_control"))
            .await
            .unwrap_or_default();
        counter(&control, "oom_kill") > 0
    }

    /// Removes the cgroup (once its processes are gone).
    pub async fn remove(&self) {
        if let Err(e) = tokio::fs::remove_dir(&self.dir).await {
            tracing::debug!(dir = %self.dir.display(), error = %e, "cgroup not removed");
        }
    }
}

/// `name N` in a flat-keyed cgroup file.
fn counter(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_read_by_name() {
        let events = "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\n";
        assert_eq!(counter(events, "oom_kill"), 1);
        assert_eq!(counter(events, "max"), 12);
        assert_eq!(
            counter("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", "oom_kill"),
            3
        );
        assert_eq!(counter("", "oom_kill"), 0);
    }
}
