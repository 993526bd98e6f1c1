//! The harness of cohort's integration tests: real binaries on 127.0.0.1.
//!
//! - [`bins`]: finds the binaries under test (building them once per test run).
//! - [`cluster`]: a coordinator on a fresh database plus N simulated agents,
//!   plaintext or secured (TLS, tokens, an agent CA), typed gRPC clients and
//!   the `cohort` CLI; everything is killed on drop.
//! - [`db`]: the test database (a SQLite file or a private PostgreSQL schema)
//!   and direct reads of what the coordinator wrote.
//! - [`job`]: small SAE configs, as TOML files for the CLI and as protos.
//! - [`launch`]: the coordinator's and the agents' command lines, and
//!   waiting until a started process is ready.
//! - [`secure`]: certificates made by `openssl`, and requests with a token.
//! - [`s3`]: moto's S3 server on 127.0.0.1 and test shards uploaded to it.
//! - [`proxy`]: a TCP proxy to cut (PostgreSQL gone, from the coordinator's side).
//! - [`procs`]: child processes in their own process groups, and a scan of
//!   `/proc` for rank processes a test left behind.
//! - [`status`]: asserting an error's code and ErrorInfo reason.
//! - [`watch`]: following WatchTraining to the end.

pub mod bins;
pub mod cluster;
pub mod db;
pub mod faults;
pub mod job;
pub mod launch;
pub mod otlp;
pub mod procs;
pub mod program;
pub mod proxy;
pub mod s3;
pub mod secure;
pub mod status;
pub mod watch;

pub use cluster::{Cluster, ClusterOptions};
pub use db::Backend;
pub use job::SaeJob;
