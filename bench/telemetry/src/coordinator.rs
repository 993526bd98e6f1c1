//! The coordinator under load: a `cohort-coordinator` process this bench
//! starts (SQLite in a temp dir, or a fresh PostgreSQL schema), or one that
//! is already running.

use anyhow::{bail, Context as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::store::Store;
use cohort_testkit::PortLease;

/// The coordinator's SQLite file under `--data-dir` (services/coordinator/src/main.rs).
const SQLITE_FILE: &str = "coordinator.db";
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A coordinator to load.
pub struct Coordinator {
    /// gRPC URL.
    pub url: String,
    /// Its process, when known (CPU and RSS are read from /proc).
    pub pid: Option<u32>,
    /// Where `GET /metrics` is served, when known.
    pub metrics: Option<SocketAddr>,
    /// Where its samples are stored, when known.
    pub store: Option<Store>,
    child: Option<Child>,
    temp_dir: Option<PathBuf>,
    pub log: Option<PathBuf>,
}

/// `cohort-coordinator` next to this executable (the same target dir and profile).
pub fn default_binary() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating this executable")?;
    let dir = exe.parent().context("the executable has a directory")?;
    let dir = if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().context("deps has a parent")?
    } else {
        dir
    };
    let bin = dir.join("cohort-coordinator");
    if !bin.is_file() {
        bail!(
            "{} is missing: build it in the same profile (cargo build --release -p cohort-coordinator -p cohort-bench-telemetry) or pass --coordinator-bin",
            bin.display()
        );
    }
    Ok(bin)
}

/// 127.0.0.1 and the port of `lease`.
fn local(lease: &PortLease) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], lease.port()))
}

fn unique_suffix() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{}_{nanos}", std::process::id())
}

impl Coordinator {
    /// One that is already running: nothing is started or stored-counted
    /// unless `pid` / `metrics` are given.
    pub fn external(url: String, pid: Option<u32>, metrics: Option<SocketAddr>) -> Self {
        Self {
            url,
            pid,
            metrics,
            store: None,
            child: None,
            temp_dir: None,
            log: None,
        }
    }

    /// Starts `binary` on free 127.0.0.1 ports, on SQLite in a temp dir, or
    /// on a new schema of the PostgreSQL server at `postgres_url`.
    pub async fn spawn(binary: &Path, postgres_url: Option<&str>) -> anyhow::Result<Self> {
        Self::spawn_with(binary, postgres_url, &[]).await
    }

    /// [`Self::spawn`] with more coordinator flags.
    pub async fn spawn_with(
        binary: &Path,
        postgres_url: Option<&str>,
        extra: &[String],
    ) -> anyhow::Result<Self> {
        let suffix = unique_suffix();
        let temp_dir = std::env::temp_dir().join(format!("cohort-bench-telemetry-{suffix}"));
        std::fs::create_dir_all(&temp_dir)
            .with_context(|| format!("creating {}", temp_dir.display()))?;
        let (store, db_args) = match postgres_url {
            Some(base) => {
                let store = Store::new_postgres_schema(base)?;
                let url = store.url().to_string();
                (store, vec!["--database-url".to_string(), url])
            }
            None => (Store::sqlite(temp_dir.join(SQLITE_FILE)), Vec::new()),
        };
        // The gRPC socket is handed over bound (--listen-fd); the metrics
        // endpoint binds its own, freed just before the coordinator starts.
        let lease = PortLease::new();
        let grpc = local(&lease);
        let metrics_lease = PortLease::new();
        let metrics = local(&metrics_lease);
        let log = temp_dir.join("coordinator.log");
        let log_file = std::fs::File::create(&log)?;
        let mut command = Command::new(binary);
        lease.pass_to(&mut command, 3);
        metrics_lease.release();
        let child = command
            .arg("--listen")
            .arg(grpc.to_string())
            .args(["--listen-fd", "3"])
            .arg("--data-dir")
            .arg(&temp_dir)
            .arg("--metrics-listen")
            .arg(metrics.to_string())
            .args(&db_args)
            .args(extra)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        drop(lease);
        let mut coordinator = Self {
            url: format!("http://{grpc}"),
            pid: Some(child.id()),
            metrics: Some(metrics),
            store: Some(store),
            child: Some(child),
            temp_dir: Some(temp_dir),
            log: Some(log),
        };
        coordinator.wait_ready(grpc).await?;
        Ok(coordinator)
    }

    async fn wait_ready(&mut self, grpc: SocketAddr) -> anyhow::Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(child) = &mut self.child {
                if let Some(status) = child.try_wait()? {
                    bail!(
                        "the coordinator exited ({status}) before listening; log: {}",
                        self.log
                            .as_ref()
                            .map(|l| l.display().to_string())
                            .unwrap_or_default()
                    );
                }
            }
            let both = tokio::net::TcpStream::connect(grpc).await.is_ok()
                && match self.metrics {
                    Some(m) => tokio::net::TcpStream::connect(m).await.is_ok(),
                    None => true,
                };
            if both {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the coordinator did not listen on {grpc} within {READY_TIMEOUT:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops a started coordinator (SIGTERM, then SIGKILL) and removes its
    /// temp dir and PostgreSQL schema.
    pub fn shutdown(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill has no memory preconditions; the pid is our child's.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if matches!(child.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        // The PostgreSQL schema goes with the store.
        drop(self.store.take());
        if let Some(dir) = self.temp_dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// `cohort_telemetry_samples_ingested_total` from the coordinator's
/// Prometheus endpoint.
pub async fn samples_ingested(metrics: SocketAddr) -> anyhow::Result<u64> {
    metric(metrics, "cohort_telemetry_samples_ingested_total")
        .await
        .map(|v| v as u64)
}

/// One unlabelled series `name` from the coordinator's Prometheus endpoint
/// (a plain HTTP/1.1 GET; the endpoint closes the connection).
pub async fn metric(metrics: SocketAddr, name: &str) -> anyhow::Result<f64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(metrics).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
        .await?;
    let mut body = String::new();
    stream.read_to_string(&mut body).await?;
    let prefix = format!("{name} ");
    body.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .with_context(|| format!("no {name} in /metrics"))?
        .trim()
        .parse::<f64>()
        .with_context(|| format!("parsing {name}"))
}
