//! What cohort's tests and benchmarks share, written once:
//!
//! - [`port`]: a port on 127.0.0.1 held bound until the process that
//!   serves it takes the socket (or, for one that must bind it itself, until
//!   the moment before it starts);
//! - [`pg`]: a private schema on the real PostgreSQL server per test;
//! - [`s3`]: moto's standalone S3 server;
//! - [`wait`]: polling with a deadline ([`eventually`]) and watching that
//!   something stays true ([`holds`]), instead of fixed sleeps.

pub mod pg;
pub mod port;
pub mod s3;
pub mod wait;

pub use pg::PgSchema;
pub use port::{free_port, PortLease};
pub use s3::S3Server;
pub use wait::{eventually, eventually_blocking, holds};

/// The project venv's python (numpy, safetensors, pyarrow, boto3, moto:
/// scripts/setup.sh); `COHORT_VENV` names another venv.
pub fn python() -> std::path::PathBuf {
    venv_bin("python")
}

/// A program of the project venv.
pub fn venv_bin(name: &str) -> std::path::PathBuf {
    match std::env::var_os("COHORT_VENV") {
        Some(venv) => std::path::PathBuf::from(venv).join("bin").join(name),
        None => workspace_root().join(".venv/bin").join(name),
    }
}

/// The `mlflow` command of the tracking tests' own venv, beside the
/// project venv (`<venv>-mlflow`, made by scripts/setup.sh test-tools).
pub fn mlflow() -> std::path::PathBuf {
    let venv = match std::env::var_os("COHORT_VENV") {
        Some(venv) => std::path::PathBuf::from(venv),
        None => workspace_root().join(".venv"),
    };
    let mut name = venv.into_os_string();
    name.push("-mlflow");
    std::path::PathBuf::from(name).join("bin/mlflow")
}

/// The workspace's root directory (where `.venv` and the scripts are).
pub fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit/ lies in the workspace")
        .to_path_buf()
}
