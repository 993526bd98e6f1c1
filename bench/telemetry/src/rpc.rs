//! Benchmark (not a test): the per-RPC cost of TLS and token checks. Starts
//! one real coordinator per mode — plaintext without auth, TLS without
//! auth, TLS with bearer tokens — with certificates made by `openssl`, and
//! times unary calls from `--clients` concurrent clients over one
//! connection each: p50/p99/max latency and calls per second. Also times a
//! fresh connection (TCP, plus the TLS handshake when on). See
//! docs/benchmarks.md.
//!
//! `cohort-bench-rpc --calls 20000 --clients 1` (then `--clients 16`)

use anyhow::{bail, Context as _};
use clap::Parser;
use cohort_bench_telemetry::histogram::Histogram;
use cohort_proto::v1::{self, admin_service_client::AdminServiceClient};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

#[derive(Debug, Parser)]
struct Args {
    /// Calls per client, after the warm-up.
    #[arg(long, default_value_t = 20_000)]
    calls: usize,
    /// Concurrent clients, each on its own connection.
    #[arg(long, default_value_t = 1)]
    clients: usize,
    /// Unmeasured calls per client first.
    #[arg(long, default_value_t = 500)]
    warmup: usize,
    /// Fresh connections timed per mode.
    #[arg(long, default_value_t = 200)]
    connects: usize,
    /// The coordinator; default: cohort-coordinator next to this executable.
    #[arg(long)]
    coordinator_bin: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Plaintext,
    Tls,
    TlsToken,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Plaintext => "plaintext, --auth none",
            Mode::Tls => "TLS, --auth none",
            Mode::TlsToken => "TLS, --auth token",
        }
    }
}

fn openssl(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()?;
    if !out.status.success() {
        bail!("openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// A CA and a server certificate for 127.0.0.1 in `dir`.
fn make_certs(dir: &Path) -> anyhow::Result<()> {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=bench CA",
    ]);
    ca.extend(["-addext", "basicConstraints=critical,CA:TRUE"]);
    openssl(dir, &ca)?;
    std::fs::write(dir.join("server.ext"), "subjectAltName=IP:127.0.0.1\n")?;
    let mut csr = vec!["req"];
    csr.extend(ec);
    csr.extend([
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    openssl(dir, &csr)?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ],
    )
}

struct Server {
    child: Child,
    port: u16,
    ca: Option<Certificate>,
    token: Option<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(bin: &Path, dir: &Path, mode: Mode) -> anyhow::Result<Server> {
    let data = dir.join(format!("data-{mode:?}"));
    std::fs::create_dir_all(&data)?;
    let token = if mode == Mode::TlsToken {
        let out = Command::new(bin)
            .args([
                "token",
                "create",
                "--team",
                "bench",
                "--name",
                "bench",
                "--role",
                "viewer",
                "--data-dir",
            ])
            .arg(&data)
            .output()?;
        if !out.status.success() {
            bail!("token create: {}", String::from_utf8_lossy(&out.stderr));
        }
        let stdout = String::from_utf8(out.stdout)?;
        Some(
            stdout
                .lines()
                .last()
                .context("a secret")?
                .trim()
                .to_string(),
        )
    } else {
        None
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut command = Command::new(bin);
    command
        .args(["--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
        .arg(&data)
        .args(["--auth", if token.is_some() { "token" } else { "none" }])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let ca = if mode == Mode::Plaintext {
        None
    } else {
        command
            .arg("--tls-cert")
            .arg(dir.join("server.pem"))
            .arg("--tls-key")
            .arg(dir.join("server.key"));
        Some(Certificate::from_pem(std::fs::read(dir.join("ca.pem"))?))
    };
    let child = command.spawn().context("starting the coordinator")?;
    Ok(Server {
        child,
        port,
        ca,
        token,
    })
}

async fn connect(server: &Server) -> anyhow::Result<Channel> {
    let scheme = if server.ca.is_some() { "https" } else { "http" };
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://127.0.0.1:{}", server.port))?;
    if let Some(ca) = &server.ca {
        endpoint = endpoint.tls_config(ClientTlsConfig::new().ca_certificate(ca.clone()))?;
    }
    Ok(endpoint.connect().await?)
}

async fn call(client: &mut AdminServiceClient<Channel>, token: Option<&str>) -> anyhow::Result<()> {
    let mut request = tonic::Request::new(v1::WhoAmIRequest {});
    if let Some(token) = token {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse()?);
    }
    client.who_am_i(request).await?;
    Ok(())
}

async fn ready(server: &Server) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(channel) = connect(server).await {
            if call(
                &mut AdminServiceClient::new(channel),
                server.token.as_deref(),
            )
            .await
            .is_ok()
            {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            bail!("the coordinator did not answer within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn us(h: &Histogram, q: f64) -> String {
    format!("{:.0}", h.quantile(q) as f64)
}

async fn measure(args: &Args, server: &Server, mode: Mode) -> anyhow::Result<()> {
    ready(server).await?;
    let mut connects = Histogram::default();
    for _ in 0..args.connects {
        let started = Instant::now();
        let channel = connect(server).await?;
        connects.record(started.elapsed().as_micros() as u64);
        drop(channel);
    }
    let mut tasks = Vec::new();
    let started = Instant::now();
    for _ in 0..args.clients {
        let mut client = AdminServiceClient::new(connect(server).await?);
        let token = server.token.clone();
        let (calls, warmup) = (args.calls, args.warmup);
        tasks.push(tokio::spawn(async move {
            let mut h = Histogram::default();
            for _ in 0..warmup {
                call(&mut client, token.as_deref()).await?;
            }
            for _ in 0..calls {
                let t = Instant::now();
                call(&mut client, token.as_deref()).await?;
                h.record(t.elapsed().as_micros() as u64);
            }
            anyhow::Ok(h)
        }));
    }
    let mut all = Histogram::default();
    for task in tasks {
        all.merge(&task.await??);
    }
    let wall = started.elapsed().as_secs_f64();
    println!(
        "{:<24} {:>8} {:>8} {:>8} {:>10.0} | {:>8} {:>8}",
        mode.name(),
        us(&all, 0.5),
        us(&all, 0.99),
        all.max(),
        all.count() as f64 / wall,
        us(&connects, 0.5),
        us(&connects, 0.99),
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let bin = match &args.coordinator_bin {
        Some(b) => b.clone(),
        None => {
            let exe = std::env::current_exe()?;
            exe.parent()
                .context("a directory")?
                .join("cohort-coordinator")
        }
    };
    if !bin.is_file() {
        bail!(
            "{} is missing: build it in this profile or pass --coordinator-bin",
            bin.display()
        );
    }
    let dir = std::env::temp_dir().join(format!("cohort-bench-rpc-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    make_certs(&dir)?;
    println!(
        "AdminService.WhoAmI (unary; no database read once a token is cached), {} clients x {} calls, one connection each; latencies in µs",
        args.clients, args.calls
    );
    println!(
        "{:<24} {:>8} {:>8} {:>8} {:>10} | {:>8} {:>8}",
        "mode", "p50", "p99", "max", "calls/s", "conn p50", "conn p99"
    );
    let mut result = Ok(());
    for mode in [Mode::Plaintext, Mode::Tls, Mode::TlsToken] {
        let server = start(&bin, &dir, mode)?;
        result = measure(&args, &server, mode).await;
        if result.is_err() {
            break;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    result
}
