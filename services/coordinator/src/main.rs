//! `cohort-coordinator --listen 127.0.0.1:50051 --data-dir DIR [--database-url postgres://...]`
//! `cohort-coordinator token create --data-dir DIR --team T --name N --role R [--expires 30d]`

use anyhow::Context as _;
use clap::Parser;
use cohort_coordinator::context::Context;
use cohort_coordinator::jobs::JobSettings;
use cohort_coordinator::leader::forward::ForwardSettings;
use cohort_coordinator::leader::{Elector, Leadership, LeaseSettings};
use cohort_coordinator::persistence::lease::Fence;
use cohort_coordinator::persistence::{DatabaseTarget, Persistence};
use cohort_coordinator::server::ServerError;
use cohort_observe::{Observability, ObservabilityArgs};
use cohort_spec::duration::parse_duration;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

const LISTEN_DEFAULT: &str = "127.0.0.1:50051";
const DATA_DIR_DEFAULT: &str = ".cohort";
/// Where job reports go under `--data-dir` (`reports/<training-id>/`).
const REPORTS_DIR: &str = "reports";
/// The SQLite file under `--data-dir` when no `--database-url` is given.
const SQLITE_FILE: &str = "coordinator.db";

/// The cohort coordinator: gRPC API, scheduler and persistence.
#[derive(Debug, Parser)]
#[command(version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: Args,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Bearer tokens, offline (before any token exists to call AdminService with).
    #[command(subcommand)]
    Token(TokenCommand),
}

#[derive(Debug, clap::Subcommand)]
enum TokenCommand {
    /// Creates a token; its secret is printed once, as the last line.
    Create(cohort_coordinator::auth::bootstrap::TokenCreateArgs),
}

/// Serving (the default command).
#[derive(Debug, clap::Args)]
struct Args {
    /// Address to serve gRPC on.
    #[arg(long, default_value = LISTEN_DEFAULT, env = "COHORT_LISTEN")]
    listen: SocketAddr,
    /// Serve on the listening TCP socket inherited as this file descriptor
    /// (bound by whoever started the coordinator: a systemd socket unit, a
    /// test harness) instead of binding --listen, which must be its address.
    #[arg(long, value_name = "FD")]
    listen_fd: Option<i32>,
    /// Directory for the coordinator's state (the SQLite database by default).
    #[arg(long, default_value = DATA_DIR_DEFAULT, env = "COHORT_DATA_DIR")]
    data_dir: PathBuf,
    /// Where programs' uploaded code snapshots are kept: a directory or
    /// s3://bucket/prefix (several coordinators: shared storage). Default:
    /// `code/` under --data-dir.
    #[arg(
        long,
        value_name = "DIR|s3://BUCKET/PREFIX",
        env = "COHORT_CODE_STORAGE"
    )]
    code_storage: Option<String>,
    /// The largest code snapshot (its .tar.gz) an upload may be, in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    code_max_mib: u64,
    /// PostgreSQL URL (postgres://user@host/db); default: SQLite under --data-dir.
    #[arg(long, env = "COHORT_DATABASE_URL")]
    database_url: Option<String>,
    /// How long raw GPU samples are kept before they become 1-minute rollups.
    #[arg(long, default_value = "24h", value_parser = cohort_spec::duration::parse_duration)]
    metrics_raw_retention: std::time::Duration,
    /// How long 1-minute GPU metric rollups are kept.
    #[arg(long, default_value = "30d", value_parser = cohort_spec::duration::parse_duration)]
    metrics_rollup_retention: std::time::Duration,
    /// An agent silent this long (no heartbeat, or disconnected) is lost and
    /// its trainings restart elsewhere.
    #[arg(long, default_value = "10s", value_parser = parse_duration, env = "COHORT_AGENT_TIMEOUT")]
    agent_timeout: Duration,
    /// Shortest silence after which a running training counts as hung; the
    /// deadline is max(--hang-factor x the time between its progress reports, this).
    #[arg(long, default_value = "60s", value_parser = parse_duration, env = "COHORT_HANG_FLOOR")]
    hang_floor: Duration,
    /// Multiple of the time between a training's progress reports after
    /// which it counts as hung.
    #[arg(long, default_value_t = 5.0, env = "COHORT_HANG_FACTOR")]
    hang_factor: f64,
    /// Grace between SIGTERM and SIGKILL when ranks are stopped.
    #[arg(long, default_value = "5s", value_parser = parse_duration, env = "COHORT_STOP_GRACE")]
    stop_grace: Duration,
    /// Serve Prometheus metrics (`GET /metrics`) on this address; off when
    /// unset. Scrapes are not authenticated: on an address other than
    /// loopback the `training_id` and `rank` labels are left empty unless
    /// --metrics-training-labels.
    #[arg(long, env = "COHORT_METRICS_LISTEN", value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
    /// Name the training and rank holding each GPU in the metrics' labels
    /// even on a non-loopback --metrics-listen (whoever can reach it learns
    /// every team's training ids).
    #[arg(long, env = "COHORT_METRICS_TRAINING_LABELS")]
    metrics_training_labels: bool,
    /// The variables (AWS_*) one team's checkpoint storage is read with for
    /// downloads (`TEAM=FILE`, repeatable; `NAME=VALUE` lines); other teams'
    /// storage is read with this process's own environment.
    #[arg(long = "team-env-file", value_name = "TEAM=FILE")]
    team_env_files: Vec<String>,
    /// Also serve grpc.health.v1 alone, in plaintext, on this address (for
    /// Kubernetes' gRPC probes, which cannot speak TLS); off when unset.
    #[arg(long, env = "COHORT_HEALTH_LISTEN", value_name = "ADDR")]
    health_listen: Option<SocketAddr>,
    /// The URL other coordinators send clients and agents to while this one
    /// leads (PostgreSQL); default: http(s)://<--listen> unless that is a
    /// wildcard address.
    #[arg(long, env = "COHORT_ADVERTISE", value_name = "URL")]
    advertise: Option<String>,
    /// An HTTP endpoint told of every team's trainings ending, failing or
    /// being preempted and of alerts: a signed JSON POST (repeatable;
    /// teams add their own with `cohort admin webhook add`).
    #[arg(long = "webhook", value_name = "URL")]
    webhooks: Vec<String>,
    /// The secret --webhook bodies are signed with (HMAC-SHA256); required
    /// with --webhook.
    #[arg(long, value_name = "FILE")]
    webhook_secret_file: Option<std::path::PathBuf>,
    /// The console's URL for the links in webhook bodies; default: the
    /// --advertise URL.
    #[arg(long, value_name = "URL")]
    console_url: Option<String>,
    /// An MLflow tracking server every team's trainings are runs in
    /// (unless the team has its own, --team-mlflow).
    #[arg(long, value_name = "URL", env = "COHORT_MLFLOW_TRACKING_URI")]
    mlflow_tracking_uri: Option<String>,
    /// A team's own MLflow tracking server (repeatable).
    #[arg(long = "team-mlflow", value_name = "TEAM=URL")]
    team_mlflow: Vec<String>,
    /// How long a webhook delivery is retried (with backoff) before it is
    /// given up.
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    webhook_retry_for: Duration,
    /// How long the leader lease lasts unrenewed (PostgreSQL): a dead
    /// leader's standbys take over after at most this plus --lease-renew.
    #[arg(long, default_value = "5s", value_parser = parse_duration, env = "COHORT_LEASE_TTL")]
    lease_ttl: Duration,
    /// Answer changes sent to a standby with NOT_LEADER and the leader's URL
    /// instead of forwarding them to the leader.
    #[arg(long, env = "COHORT_NO_FORWARD")]
    no_forward: bool,
    /// PEM CA of the other coordinators' certificates, for forwarding to an
    /// https:// leader (default: the CA of this one's --tls-cert chain is
    /// not guessed: without it, changes to a standby get NOT_LEADER).
    #[arg(long, env = "COHORT_PEER_CA", value_name = "FILE")]
    peer_ca: Option<PathBuf>,
    /// The name the other coordinators' certificates carry, when it is not
    /// the host of their --advertise URL (e.g. the Service's DNS name).
    #[arg(long, env = "COHORT_PEER_TLS_NAME", value_name = "NAME")]
    peer_tls_name: Option<String>,
    /// How often the leader renews its lease and standbys try to take it.
    #[arg(long, default_value = "1s", value_parser = parse_duration, env = "COHORT_LEASE_RENEW")]
    lease_renew: Duration,
    #[command(flatten)]
    security: cohort_coordinator::auth::flags::SecurityFlags,
    /// GPUs guaranteed to a team without a quota of its own (default: none;
    /// while no team has a guarantee, no limit).
    #[arg(long, env = "COHORT_DEFAULT_TEAM_GPUS", value_name = "N")]
    default_team_gpus: Option<u32>,
    /// QUEUED trainings a team may have at once, unless its quota says otherwise.
    #[arg(
        long,
        default_value_t = 1000,
        env = "COHORT_MAX_QUEUED_PER_TEAM",
        value_name = "N"
    )]
    max_queued_per_team: u32,
    /// What a GPU-hour costs, by GPU model: PATTERN=USD_PER_GPU_HOUR
    /// (repeatable; the first pattern found in a GPU's model name, ignoring
    /// case, prices it), e.g. `--gpu-price H100=2.50 --gpu-price A100=1.20`.
    /// Every report's cost analysis uses it; without a match it gives
    /// GPU-hours only.
    #[arg(
        long = "gpu-price",
        value_name = "PATTERN=USD",
        env = "COHORT_GPU_PRICES",
        value_delimiter = ','
    )]
    gpu_prices: Vec<cohort_coordinator::report::cost::GpuPrice>,
    #[command(flatten)]
    scheduling: cohort_coordinator::jobs::flags::SchedulingFlags,
    #[command(flatten)]
    alerts: cohort_coordinator::alerts::AlertFlags,
    #[command(flatten)]
    observability: ObservabilityArgs,
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutdown requested");
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Some(Command::Token(TokenCommand::Create(args))) = cli.command {
        return create_token(args).await;
    }
    let args = cli.serve;
    let observability = Observability::init("cohort-coordinator", &args.observability)?;
    let result = serve(args).await;
    observability.shutdown().await;
    if let Some(ServerError::Deposed { .. }) = result
        .as_ref()
        .err()
        .and_then(|e| e.downcast_ref::<ServerError>())
    {
        // Not a crash: the supervisor starts it again and it stands by.
        eprintln!("cohort-coordinator: {}", result.as_ref().unwrap_err());
        std::process::exit(EXIT_DEPOSED);
    }
    result
}

/// The exit status of a coordinator that lost the leader lease (EX_TEMPFAIL).
const EXIT_DEPOSED: i32 = 75;

/// The listening socket inherited as `fd` (`--listen-fd`): it must be a TCP
/// socket bound to `listen`, so what the coordinator advertises and checks
/// (loopback, TLS) is where it really serves.
fn inherited_listener(fd: i32, listen: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    use std::os::fd::FromRawFd;
    if fd <= 2 {
        anyhow::bail!("--listen-fd {fd}: descriptors 0-2 are stdin, stdout and stderr");
    }
    // SAFETY: the descriptor was handed to this process to serve on; it is
    // taken once, here, and owned by the listener from now on.
    let socket = unsafe { std::net::TcpListener::from_raw_fd(fd) };
    let at = socket
        .local_addr()
        .with_context(|| format!("--listen-fd {fd} is not a bound TCP socket"))?;
    if at != listen {
        anyhow::bail!("--listen-fd {fd} is bound to {at}, but --listen says {listen}");
    }
    socket.set_nonblocking(true)?;
    tokio::net::TcpListener::from_std(socket).context("--listen-fd")
}

/// The URL to advertise: `--advertise`, or the listen address when it names
/// one host.
fn advertise_url(args: &Args, tls: bool) -> anyhow::Result<String> {
    if let Some(url) = &args.advertise {
        return Ok(url.clone());
    }
    if args.listen.ip().is_unspecified() {
        anyhow::bail!(
            "--listen {} names no single address: give --advertise URL (where other coordinators send clients and agents)",
            args.listen
        );
    }
    let scheme = if tls { "https" } else { "http" };
    Ok(format!("{scheme}://{}", args.listen))
}

fn database(data_dir: &std::path::Path, url: Option<&str>) -> DatabaseTarget {
    match url {
        Some(url) => DatabaseTarget::from_url(url),
        None => DatabaseTarget::Sqlite(data_dir.join(SQLITE_FILE)),
    }
}

/// `token create`: the token's description on stderr, its secret alone on
/// the last line of stdout (nothing else is printed there).
async fn create_token(
    args: cohort_coordinator::auth::bootstrap::TokenCreateArgs,
) -> anyhow::Result<()> {
    let data_dir = args.data_dir.clone().unwrap_or_default();
    if args.database_url.is_none() {
        tokio::fs::create_dir_all(&data_dir)
            .await
            .with_context(|| format!("creating {}", data_dir.display()))?;
    }
    let db = Persistence::open(database(&data_dir, args.database_url.as_deref()))
        .await
        .context("opening the database")?;
    let (token, secret) = cohort_coordinator::auth::bootstrap::create(&db, &args).await?;
    let expiry = token.expire_time.map_or("never expires".to_string(), |t| {
        format!("expires {}", t.to_rfc3339())
    });
    eprintln!(
        "token {} of team {} with role {} ({expiry}); its secret is shown once, below:",
        token.name, token.team, token.role
    );
    println!("{secret}");
    Ok(())
}

async fn serve(args: Args) -> anyhow::Result<()> {
    let security = args
        .security
        .resolve(args.listen)
        .map_err(anyhow::Error::msg)?;
    let tls = security.tls.is_some();
    let target = database(&args.data_dir, args.database_url.as_deref());
    // Held until the process ends: a second coordinator on this file refuses.
    let _sqlite_lock = match &target {
        DatabaseTarget::Sqlite(path) => Some(
            cohort_coordinator::persistence::exclusive::lock_sqlite(path)
                .await
                .map_err(anyhow::Error::new)?,
        ),
        _ => None,
    };
    let (db, election, forward) = open_database(&args, target, tls).await?;
    let history = history(&args)?;
    let (listener, reloader, agent_ca) = listen(&args, &security).await?;
    tracing::info!(auth = ?security.mode, tls, agent_certs = security.agent_certs, "security");
    let leadership = election
        .as_ref()
        .map(|(l, _)| l.clone())
        .unwrap_or_else(|| {
            // Alone on SQLite: the member set is this coordinator, when it
            // has a URL to give.
            let alone = Leadership::alone();
            if let Ok(url) = advertise_url(&args, tls) {
                alone.set_members(vec![url]);
            }
            alone
        });
    let ctx = Context::with_settings(db, job_settings(&args))
        .with_storage_env(team_storage_env(&args).await?)
        .with_agent_ca(agent_ca)
        .with_leadership(leadership)
        .with_forwarding(forward)
        .with_history(history)
        .with_alert_settings(args.alerts.settings())
        .with_webhooks(webhooks(&args, tls).await?)
        .with_tracking(tracking(&args)?)
        .with_code(code_store(&args).await?)
        .with_auth(cohort_coordinator::auth::AuthSettings {
            mode: security.mode,
            agent_certs: security.agent_certs,
            agent_names: security.agent_names.clone(),
            audit_retention: args.security.audit_retention,
        });
    if let Some(reloader) = reloader {
        ctx.tasks.spawn(cohort_coordinator::tls::reload_on_sighup(
            reloader,
            ctx.tasks.cancelled(),
        ));
    }
    serve_metrics(&args, &ctx).await?;
    let probes = match args.health_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding --health-listen {addr}"))?,
        ),
        None => None,
    };
    let served =
        cohort_coordinator::server::run_with_health(listener, probes, ctx, shutdown_signal()).await;
    if let Some((_, elector)) = election {
        if served.is_ok() {
            elector.stop().await;
        }
    }
    served?;
    Ok(())
}

/// The coordinator's election, when its database elects one.
type Election = Option<(Leadership, Elector)>;

/// Opens the database. On PostgreSQL coordinators elect a leader and every
/// write passes the fence; changes sent to a standby are forwarded.
async fn open_database(
    args: &Args,
    target: DatabaseTarget,
    tls: bool,
) -> anyhow::Result<(Persistence, Election, ForwardSettings)> {
    let elected = matches!(target, DatabaseTarget::Postgres(_));
    let db = Persistence::open(target)
        .await
        .context("opening the database")?;
    if !elected {
        return Ok((db, None, ForwardSettings::default()));
    }
    let settings = LeaseSettings {
        ttl: args.lease_ttl,
        renew: args.lease_renew,
        holder: uuid::Uuid::new_v4().to_string(),
        advertise: advertise_url(args, tls)?,
    };
    settings.validate().map_err(anyhow::Error::msg)?;
    let forward = ForwardSettings {
        enabled: !args.no_forward,
        me: settings.advertise.clone(),
        peer_ca: match &args.peer_ca {
            Some(path) => Some(
                tokio::fs::read(path)
                    .await
                    .with_context(|| format!("reading --peer-ca {}", path.display()))?,
            ),
            None => None,
        },
        peer_tls_name: args.peer_tls_name.clone(),
    };
    let fence = std::sync::Arc::new(Fence::default());
    let leadership = Leadership::elected();
    let elector = Elector::start(db.clone(), fence.clone(), settings, leadership.clone());
    Ok((db.fenced(fence), Some((leadership, elector)), forward))
}

/// The telemetry history, with the retention the flags ask for.
fn history(args: &Args) -> anyhow::Result<cohort_coordinator::history::History> {
    let settings = cohort_coordinator::history::HistorySettings {
        raw_retention: args.metrics_raw_retention,
        rollup_retention: args.metrics_rollup_retention,
        ..Default::default()
    };
    settings.validate().map_err(anyhow::Error::msg)?;
    Ok(cohort_coordinator::history::History::new(
        settings,
        std::sync::Arc::new(cohort_coordinator::history::SystemClock),
    ))
}

/// The gRPC listener (a socket handed over, or bound here), with TLS when
/// configured: then also its reloader and the agents' CA.
async fn listen(
    args: &Args,
    security: &cohort_coordinator::auth::flags::Security,
) -> anyhow::Result<(
    cohort_coordinator::server::Listener,
    Option<cohort_coordinator::tls::TlsReloader>,
    cohort_coordinator::tls::AgentCa,
)> {
    let tcp = match args.listen_fd {
        Some(fd) => inherited_listener(fd, args.listen)?,
        None => tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("binding {}", args.listen))?,
    };
    Ok(match security.tls.clone() {
        Some(files) => {
            let tls = cohort_coordinator::tls::TlsListener::new(tcp, files)
                .context("loading TLS files")?;
            let (reloader, agent_ca) = (tls.reloader(), tls.agent_ca());
            (tls.into(), Some(reloader), agent_ca)
        }
        None => (tcp.into(), None, Default::default()),
    })
}

/// The job runner's settings from the flags.
fn job_settings(args: &Args) -> JobSettings {
    args.scheduling.apply(JobSettings {
        agent_timeout: args.agent_timeout,
        hang_floor: args.hang_floor,
        hang_factor: args.hang_factor,
        stop_grace: args.stop_grace,
        reports_dir: Some(args.data_dir.join(REPORTS_DIR)),
        quotas: cohort_coordinator::jobs::QuotaDefaults {
            team_gpus: args.default_team_gpus,
            max_queued: args.max_queued_per_team,
        },
        prices: cohort_coordinator::report::cost::Prices(args.gpu_prices.clone()),
        ..JobSettings::default()
    })
}

/// Each team's storage variables (`--team-env-file TEAM=FILE`), read once.
/// Where code snapshots are kept (`--code-storage`, `--code-max-mib`).
async fn code_store(args: &Args) -> anyhow::Result<cohort_coordinator::code::CodeStore> {
    let at = match &args.code_storage {
        Some(uri) => cohort_spec::location::Location::parse(uri)
            .map_err(|e| anyhow::anyhow!("--code-storage: {e}"))?,
        None => cohort_spec::location::Location::Local(args.data_dir.join("code")),
    };
    cohort_coordinator::code::CodeStore::open(
        at,
        args.data_dir.join("code-staging"),
        args.code_max_mib << 20,
    )
    .await
    .map_err(|e| anyhow::anyhow!("code storage: {e}"))
}

/// Which MLflow server each team's trainings go to.
fn tracking(args: &Args) -> anyhow::Result<cohort_coordinator::tracking::TrackingSettings> {
    let http = |flag: &str, url: &str| {
        if url.starts_with("http://") || url.starts_with("https://") {
            Ok(url.trim_end_matches('/').to_string())
        } else {
            Err(anyhow::anyhow!(
                "{flag} {url}: must start with http:// or https://"
            ))
        }
    };
    let default_uri = args
        .mlflow_tracking_uri
        .as_deref()
        .map(|u| http("--mlflow-tracking-uri", u))
        .transpose()?;
    let mut teams = std::collections::HashMap::new();
    for arg in &args.team_mlflow {
        let (team, url) = arg
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("--team-mlflow {arg}: expected TEAM=URL"))?;
        teams.insert(team.to_string(), http("--team-mlflow", url)?);
    }
    Ok(cohort_coordinator::tracking::TrackingSettings { default_uri, teams })
}

/// The operator's webhooks (`--webhook`, signed with
/// `--webhook-secret-file`) and the console's URL for their links.
async fn webhooks(
    args: &Args,
    tls: bool,
) -> anyhow::Result<cohort_coordinator::webhooks::Webhooks> {
    let secret = match (&args.webhook_secret_file, args.webhooks.is_empty()) {
        (Some(file), _) => tokio::fs::read_to_string(file)
            .await
            .map_err(|e| anyhow::anyhow!("--webhook-secret-file {}: {e}", file.display()))?
            .trim()
            .to_string(),
        (None, true) => String::new(),
        (None, false) => {
            anyhow::bail!("--webhook needs --webhook-secret-file (the bodies are signed)")
        }
    };
    if !args.webhooks.is_empty() && secret.is_empty() {
        anyhow::bail!("--webhook-secret-file is empty");
    }
    for url in &args.webhooks {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            anyhow::bail!("--webhook {url}: must start with http:// or https://");
        }
    }
    let settings = cohort_coordinator::webhooks::WebhookSettings {
        urls: args.webhooks.clone(),
        secret,
        console_url: args
            .console_url
            .clone()
            .or_else(|| advertise_url(args, tls).ok()),
    };
    let deliveries = cohort_coordinator::webhooks::deliver::Deliveries::new(args.webhook_retry_for);
    Ok(cohort_coordinator::webhooks::Webhooks::new(
        settings, deliveries,
    ))
}

async fn team_storage_env(
    args: &Args,
) -> anyhow::Result<cohort_coordinator::export::source::TeamEnv> {
    let mut storage_env = cohort_coordinator::export::source::TeamEnv::new();
    for arg in &args.team_env_files {
        let (team, file) = arg
            .split_once('=')
            .filter(|(t, f)| !t.is_empty() && !f.is_empty())
            .with_context(|| format!("--team-env-file {arg:?}: expected TEAM=FILE"))?;
        let text = tokio::fs::read_to_string(file)
            .await
            .with_context(|| format!("--team-env-file: reading {file}"))?;
        let vars = cohort_spec::envfile::parse(&text)
            .map_err(|e| anyhow::anyhow!("--team-env-file {file}: {e}"))?;
        if storage_env.insert(team.to_string(), vars).is_some() {
            anyhow::bail!("--team-env-file: team {team} is given twice");
        }
    }
    Ok(storage_env)
}

/// The Prometheus endpoint (`--metrics-listen`), a background task stopped
/// and awaited with the others.
async fn serve_metrics(args: &Args, ctx: &Context) -> anyhow::Result<()> {
    let Some(addr) = args.metrics_listen else {
        return Ok(());
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding --metrics-listen {addr}"))?;
    ctx.tasks.spawn(cohort_coordinator::metrics::serve_exposing(
        listener,
        ctx.clone(),
        ctx.tasks.cancelled(),
        addr.ip().is_loopback() || args.metrics_training_labels,
    ));
    Ok(())
}
