//! Landlock confinement of a program's ranks (docs/security.md).
//!
//! Each rank of a program may read and execute the system directories, the
//! interpreter its command names (a virtualenv and the base Python it was
//! made from), the agent's program roots and its team's data roots; it may
//! write only its run directory (with its private HOME and TMPDIR) and its
//! checkpoint directory, and use the devices a GPU job needs (/dev/null and
//! the like, the NVIDIA and InfiniBand devices, /dev/shm) — not a disk.
//! Everything else on the file system — the shared /tmp, home directories,
//! the agent's key and work dir, other trainings' run dirs, other teams'
//! files — answers EACCES. The network is not restricted (the ranks must
//! reach each other).
//!
//! The ruleset is built in the agent (opening each allowed path); the child
//! only calls `prctl(PR_SET_NO_NEW_PRIVS)` and `landlock_restrict_self`
//! between fork and exec — both plain system calls, safe there.

use landlock::{
    path_beneath_rules, Access, AccessFs, Ruleset, RulesetAttr, RulesetCreatedAttr, ABI,
};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use tokio::process::Command;

/// `--program-sandbox`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum SandboxMode {
    /// Confine each program rank with Landlock (refused on a kernel without it).
    #[default]
    Landlock,
    /// Run programs unconfined.
    None,
}

/// Read and execute on these, system-wide.
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/proc", "/sys", "/run",
];

/// Device files any program may read and write.
const COMMON_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// The devices of a GPU job: the common ones, every `/dev/nvidia*` (GPUs,
/// the control and UVM devices, the capabilities) and `/dev/infiniband`.
/// Blocking: it lists /dev.
#[allow(clippy::disallowed_methods)]
fn devices() -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = COMMON_DEVICES.iter().map(PathBuf::from).collect();
    found.push(PathBuf::from("/dev/infiniband"));
    if let Ok(entries) = std::fs::read_dir("/dev") {
        found.extend(
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("nvidia"))
                .map(|e| e.path()),
        );
    }
    found
}

/// The ABI version of the running kernel's Landlock; 0 without it.
pub fn kernel_abi() -> i64 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute and size 0 this call only returns the
    // ABI version (or -1); it touches no memory.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    version.max(0)
}

/// What one program rank may reach.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxRules {
    /// Read and execute.
    pub read_exec: Vec<PathBuf>,
    /// Read, write, create and remove.
    pub write: Vec<PathBuf>,
    /// Device files (and device directories) to read, write and ioctl.
    pub devices: Vec<PathBuf>,
}

impl SandboxRules {
    /// The rules of a program whose command starts with `program`, run
    /// from `working_dir` with `run_dir` and `checkpoint_dir` its own.
    pub fn for_program(
        program: &Path,
        program_roots: &[PathBuf],
        data_roots: &[PathBuf],
        run_dir: &Path,
        checkpoint_dir: &Path,
    ) -> Self {
        let mut read_exec: Vec<PathBuf> = SYSTEM_DIRS.iter().map(PathBuf::from).collect();
        read_exec.extend(interpreter_dirs(program));
        read_exec.extend(program_roots.iter().cloned());
        read_exec.extend(data_roots.iter().cloned());
        let write = vec![
            run_dir.to_path_buf(),
            checkpoint_dir.to_path_buf(),
            // Shared memory (NCCL's, Python multiprocessing's).
            PathBuf::from("/dev/shm"),
        ];
        Self {
            read_exec,
            write,
            devices: devices(),
        }
    }
}

/// The directories an interpreter needs: for `<venv>/bin/python`, the
/// virtualenv and the base installation its `pyvenv.cfg` names; for any
/// other program, its own directory; and wherever its links lead.
fn interpreter_dirs(program: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let Some(bin) = program.parent() else {
        return dirs;
    };
    match bin
        .parent()
        .filter(|_| bin.file_name().is_some_and(|n| n == "bin"))
    {
        Some(prefix) => {
            dirs.push(prefix.to_path_buf());
            // SAFETY of blocking: called off the runtime (see `launch`).
            #[allow(clippy::disallowed_methods)]
            if let Ok(cfg) = std::fs::read_to_string(prefix.join("pyvenv.cfg")) {
                for line in cfg.lines() {
                    let Some((key, value)) = line.split_once('=') else {
                        continue;
                    };
                    if key.trim() == "home" {
                        let home = PathBuf::from(value.trim());
                        dirs.push(home.parent().map_or(home.clone(), Path::to_path_buf));
                    }
                }
            }
        }
        None => dirs.push(bin.to_path_buf()),
    }
    if let Ok(real) = std::fs::canonicalize(program) {
        if let Some(dir) = real.parent().and_then(Path::parent) {
            dirs.push(dir.to_path_buf());
        }
    }
    dirs
}

/// A Landlock ruleset ready to be applied in a child.
#[derive(Debug)]
pub struct Confinement {
    fd: OwnedFd,
}

impl Confinement {
    /// Builds the ruleset (opening every allowed path that exists).
    pub fn build(rules: &SandboxRules) -> Result<Self, String> {
        let abi = ABI::V5;
        let created = Ruleset::default()
            .handle_access(AccessFs::from_all(abi))
            .and_then(|r| r.create())
            .and_then(|r| {
                r.add_rules(path_beneath_rules(
                    &rules.read_exec,
                    AccessFs::from_read(abi),
                ))
            })
            .and_then(|r| r.add_rules(path_beneath_rules(&rules.write, AccessFs::from_all(abi))))
            .and_then(|r| {
                let device = AccessFs::from_read(abi)
                    | AccessFs::WriteFile
                    | AccessFs::Truncate
                    | AccessFs::IoctlDev;
                r.add_rules(path_beneath_rules(&rules.devices, device))
            })
            .map_err(|e| format!("cannot build the Landlock ruleset: {e}"))?;
        let fd: Option<OwnedFd> = created.into();
        let fd = fd.ok_or("this kernel has no Landlock")?;
        Ok(Self { fd })
    }

    /// Makes `command`'s child restrict itself before it execs.
    pub fn apply(self, command: &mut Command) {
        let fd = self.fd;
        // SAFETY: prctl and syscall are async-signal-safe; the closure
        // allocates nothing. The ruleset fd stays open in the parent until
        // the command is dropped, after the fork.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // test set-up writes files synchronously
mod tests {
    use super::*;

    #[test]
    fn a_virtualenv_brings_its_base_python() {
        let dir = tempfile::tempdir().unwrap();
        let venv = dir.path().join("venv");
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        std::fs::write(
            venv.join("pyvenv.cfg"),
            "home = /opt/base/bin\ninclude-system-site-packages = false\n",
        )
        .unwrap();
        let dirs = interpreter_dirs(&venv.join("bin/python"));
        assert!(dirs.contains(&venv), "{dirs:?}");
        assert!(dirs.contains(&PathBuf::from("/opt/base")), "{dirs:?}");
        assert_eq!(
            interpreter_dirs(Path::new("/srv/tool/run")),
            [PathBuf::from("/srv/tool")]
        );
    }

    /// A confined child reads what it is given and nothing else.
    #[tokio::test]
    async fn a_confined_child_is_denied_what_it_was_not_given() {
        if kernel_abi() < 1 {
            eprintln!("SKIPPED: this kernel has no Landlock");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let (mine, other) = (dir.path().join("mine"), dir.path().join("other"));
        for d in [&mine, &other] {
            std::fs::create_dir_all(d).unwrap();
            std::fs::write(d.join("f"), "x").unwrap();
        }
        let rules = SandboxRules {
            read_exec: SYSTEM_DIRS.iter().map(PathBuf::from).collect(),
            write: vec![mine.clone()],
            devices: devices(),
        };
        let run = |path: PathBuf| {
            let rules = rules.clone();
            async move {
                let mut command = Command::new("/bin/cat");
                command.arg(path);
                Confinement::build(&rules).unwrap().apply(&mut command);
                command.output().await.unwrap()
            }
        };
        assert!(run(mine.join("f")).await.status.success());
        assert!(run(PathBuf::from("/dev/null")).await.status.success());
        let denied = run(other.join("f")).await;
        assert!(!denied.status.success());
        assert!(
            String::from_utf8_lossy(&denied.stderr).contains("Permission denied"),
            "{denied:?}"
        );
    }
}
