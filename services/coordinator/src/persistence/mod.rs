//! Persistence: SQLite (the embedded default) or PostgreSQL through diesel.
//!
//! [`Persistence`] owns an r2d2 pool of [`DbConnection`]s. Every operation runs
//! as ONE transaction on a blocking thread (`spawn_blocking`) — on SQLite an
//! IMMEDIATE one unless it only reads ([`Persistence::read`]) — is retried when
//! the database reports a serialization failure or a busy/stale SQLite
//! snapshot, and logs its latency. Migrations are embedded and applied at open.
//!
//! Queries are grouped by what they are about, each module owning its
//! tables (`schema.rs` holds them all, `rows.rs` their row structs):
//!
//! - a training's life: `lifecycle/` (creates and their group commit,
//!   placements, restarts) over `trainings`, `state_transitions`,
//!   `training_labels`; [`trainings`] (state changes and reads); [`ranks`]
//!   (`ranks`); [`events`] (`training_events`); [`checkpoints`]
//!   (`checkpoints`, `best_checkpoints`); [`notices`] (`training_notices`);
//!   [`estimates`] (`training_estimates`); [`waiting`] and [`details`]
//!   (reads for the scheduler and for a page of trainings);
//! - the fleet: [`fleet`] (`agents`, `gpus`), [`maintenance`] (cordons,
//!   drains, quarantined GPUs), [`gpu_metrics`] (`gpu_metrics`,
//!   `gpu_metrics_rollup`), [`alerts`] (`alerts`);
//! - teams: [`tokens`] (`tokens`), [`quotas`] (`team_quotas`),
//!   [`sharing`] (`team_usage`), [`audit`] (`audit_events`), [`webhooks`]
//!   (`webhooks`, and the state transitions they announce); [`sweeps`]
//!   (`sweeps`, `sweep_trials`: a trial's row is written with its training);
//! - coordinators (PostgreSQL only, outside diesel's schema): [`lease`]
//!   (`coordinator_lease`) and `members.rs` (`coordinator_members`);
//! - the machinery: `connection.rs`, `pool.rs`, [`measure`], [`exclusive`]
//!   (one coordinator per SQLite file), `bell.rs` (waking watchers after a
//!   commit), `error.rs` and `logical.rs` (what can go wrong).

pub mod alerts;
pub mod audit;
mod bell;
pub mod checkpoints;
mod connection;
pub mod details;
mod error;
pub mod estimates;
pub mod events;
pub mod exclusive;
pub mod fleet;
pub mod gpu_metrics;
mod labels;
pub mod lease;
mod lifecycle;
mod logical;
pub mod maintenance;
pub mod measure;
mod members;
pub mod notices;
mod pool;
pub mod quotas;
pub mod ranks;
mod rows;
pub mod schema;
pub mod sharing;
pub mod sweeps;
pub mod tokens;
pub mod trainings;
pub mod waiting;
pub mod webhooks;

pub use bell::{EventBell, Outbox};
pub use checkpoints::{CheckpointRecord, Recorded};
pub use connection::{DatabaseTarget, DbConnection, SQLITE_BUSY_TIMEOUT};
pub use error::{DatabaseError, LogicalError};
pub use fleet::AgentRegistration;
pub use lifecycle::creates::{Created, NewTraining};
pub use lifecycle::placements;
pub use measure::{OpMetrics, OpStats};
/// How long after its last use a pooled connection is handed out untested.
pub use pool::FRESH as POOL_FRESH_WINDOW;
pub use trainings::{ListTrainings, TrainingCursor};

use diesel::r2d2::Pool;
use diesel::Connection;
use pool::ConnectionManager;
use std::time::{Duration, Instant};

/// Tuning of [`Persistence::open_with`].
#[derive(Debug, Clone)]
pub struct PersistenceOptions {
    /// Pool size; `None`: 4 for SQLite, 8 for PostgreSQL.
    pub max_connections: Option<u32>,
    /// How long one checkout from the pool may wait.
    pub checkout_timeout: Duration,
    /// How long `open` waits for the database to accept connections.
    pub startup_timeout: Duration,
    /// Attempts of a transaction that keeps hitting retryable errors.
    pub max_attempts: u32,
}

impl Default for PersistenceOptions {
    fn default() -> Self {
        Self {
            max_connections: None,
            checkout_timeout: Duration::from_secs(5),
            startup_timeout: Duration::from_secs(30),
            max_attempts: 5,
        }
    }
}

/// The coordinator's database. Cheap to clone (the pool is shared).
#[derive(Clone)]
pub struct Persistence {
    pool: Pool<ConnectionManager>,
    target: DatabaseTarget,
    max_attempts: u32,
    /// Rung after a commit that wrote training events.
    bell: EventBell,
    /// Latency and errors per named operation.
    metrics: OpMetrics,
    /// Set on PostgreSQL coordinators that elect a leader: writes pass it.
    fence: Option<std::sync::Arc<lease::Fence>>,
    /// The group commit of CreateTraining, started by the first create.
    creates: std::sync::Arc<std::sync::OnceLock<lifecycle::creates::CreateQueue>>,
    /// SQLite has one writer at a time: this process's writers take turns
    /// here, each handed the lock the moment the last one lets go, instead
    /// of in SQLite's busy handler, which polls with sleeps growing to
    /// 100 ms (a create behind a 20 ms write waited up to 50 ms more).
    /// `busy_timeout` still covers another process on the file.
    writers: Option<std::sync::Arc<std::sync::Mutex<()>>>,
}

impl std::fmt::Debug for Persistence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Persistence")
            .field("database", &self.target.redacted())
            .finish()
    }
}

impl Persistence {
    /// Opens the database with default options and applies pending migrations.
    pub async fn open(target: DatabaseTarget) -> Result<Self, DatabaseError> {
        Self::open_with(target, PersistenceOptions::default()).await
    }

    /// Opens the database, waiting up to `startup_timeout` for it to accept
    /// connections, and applies pending migrations.
    pub async fn open_with(
        target: DatabaseTarget,
        options: PersistenceOptions,
    ) -> Result<Self, DatabaseError> {
        tokio::task::spawn_blocking(move || Self::open_blocking(target, options))
            .await
            .map_err(|e| DatabaseError::Task(e.to_string()))?
    }

    /// Runs on a blocking thread (see [`Persistence::open_with`]).
    #[allow(clippy::disallowed_methods)]
    fn open_blocking(
        target: DatabaseTarget,
        options: PersistenceOptions,
    ) -> Result<Self, DatabaseError> {
        if let DatabaseTarget::Sqlite(path) = &target {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| {
                    DatabaseError::Connect(format!("cannot create {}: {e}", dir.display()))
                })?;
            }
        }
        let max_size = options.max_connections.unwrap_or(match target {
            DatabaseTarget::Sqlite(_) => 4,
            DatabaseTarget::Postgres(_) => 8,
        });
        let deadline = Instant::now() + options.startup_timeout;
        let pool = loop {
            let built = Pool::builder()
                .max_size(max_size)
                .min_idle(Some(1))
                .connection_timeout(options.checkout_timeout.min(options.startup_timeout))
                .build(ConnectionManager::new(target.clone()));
            match built {
                Ok(pool) => break pool,
                Err(e) if Instant::now() < deadline => {
                    tracing::warn!(database = %target.redacted(), error = %e, "database not ready, retrying");
                    std::thread::sleep(Duration::from_millis(500));
                }
                Err(e) => {
                    return Err(DatabaseError::Connect(format!(
                        "{}: {e}",
                        target.redacted()
                    )))
                }
            }
        };
        let mut conn = pool.get().map_err(|e| DatabaseError::Pool(e.to_string()))?;
        let applied = connection::run_migrations(&mut conn)?;
        tracing::info!(
            backend = target.backend_name(),
            database = %target.redacted(),
            migrations_applied = applied,
            "database ready"
        );
        let writers = matches!(target, DatabaseTarget::Sqlite(_)).then(Default::default);
        Ok(Self {
            pool,
            target,
            max_attempts: options.max_attempts.max(1),
            bell: EventBell::default(),
            metrics: OpMetrics::default(),
            fence: None,
            creates: Default::default(),
            writers,
        })
    }

    /// This handle with a create queue of its own (started by its first
    /// create): what a create worker holds, so that dropping every other
    /// handle closes the queue and ends the worker.
    fn detached(&self) -> Self {
        Self {
            creates: Default::default(),
            ..self.clone()
        }
    }

    /// Which database this is.
    pub fn target(&self) -> &DatabaseTarget {
        &self.target
    }

    /// Runs `f` as one transaction that may write, on a blocking thread,
    /// retrying it on retryable errors. `op` names the operation in logs.
    ///
    /// On SQLite it is `BEGIN IMMEDIATE`: the write lock is taken (waiting
    /// up to [`SQLITE_BUSY_TIMEOUT`]) before the first read. A deferred
    /// transaction that reads and then writes must upgrade its read lock,
    /// and in WAL mode SQLite refuses that upgrade at once with
    /// `database is locked` when another writer got in between, whatever the
    /// busy timeout. PostgreSQL: a plain `BEGIN`.
    pub async fn transaction<T, F>(&self, op: &'static str, f: F) -> Result<T, DatabaseError>
    where
        T: Send + 'static,
        F: Fn(&mut DbConnection) -> Result<T, DatabaseError> + Send + 'static,
    {
        self.run(op, Mode::Write, move |c, _| f(c)).await
    }

    /// [`Persistence::transaction`] for writes that append events or change
    /// a training's state: they note it in the [`Outbox`] beside the
    /// connection, which rings the watchers once the transaction committed
    /// (a rollback drops it; a retry starts a fresh one).
    pub async fn transaction_noting<T, F>(&self, op: &'static str, f: F) -> Result<T, DatabaseError>
    where
        T: Send + 'static,
        F: Fn(&mut DbConnection, &mut Outbox) -> Result<T, DatabaseError> + Send + 'static,
    {
        self.run(op, Mode::Write, f).await
    }

    /// [`Persistence::transaction`] without the leader fence: the lease
    /// itself, and audit rows of refused calls, which any coordinator of
    /// the database may append.
    pub(crate) async fn unfenced<T, F>(&self, op: &'static str, f: F) -> Result<T, DatabaseError>
    where
        T: Send + 'static,
        F: Fn(&mut DbConnection) -> Result<T, DatabaseError> + Send + 'static,
    {
        self.run(op, Mode::Unfenced, move |c, _| f(c)).await
    }

    /// Runs `f`, which only reads, as one transaction (a deferred one on
    /// SQLite: readers don't wait for the writer in WAL mode), like
    /// [`Persistence::transaction`] otherwise.
    pub async fn read<T, F>(&self, op: &'static str, f: F) -> Result<T, DatabaseError>
    where
        T: Send + 'static,
        F: Fn(&mut DbConnection) -> Result<T, DatabaseError> + Send + 'static,
    {
        self.run(op, Mode::Read, move |c, _| f(c)).await
    }

    async fn run<T, F>(&self, op: &'static str, mode: Mode, f: F) -> Result<T, DatabaseError>
    where
        T: Send + 'static,
        F: Fn(&mut DbConnection, &mut Outbox) -> Result<T, DatabaseError> + Send + 'static,
    {
        let pool = self.pool.clone();
        let max_attempts = self.max_attempts;
        let started = Instant::now();
        // A fenced write goes on only as the leader, at the epoch it has now.
        let fence = match (&self.fence, mode) {
            (Some(fence), Mode::Write) => match fence.state() {
                lease::FenceState::Leading { holder, epoch } => Some((holder, epoch)),
                lease::FenceState::Standby => return Err(DatabaseError::NotLeader),
            },
            _ => None,
        };
        let writers = match mode {
            Mode::Write | Mode::Unfenced => self.writers.clone(),
            Mode::Read => None,
        };
        let outcome = tokio::task::spawn_blocking(move || {
            // The turn first, then a connection: a writer waiting its turn
            // holds none that a reader could use.
            let _turn = writers
                .as_ref()
                .map(|w| w.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
            let mut conn = pool.get().map_err(|e| DatabaseError::Pool(e.to_string()))?;
            let mut attempt = 1;
            loop {
                let mut outbox = Outbox::default();
                let result = match mode {
                    Mode::Write | Mode::Unfenced => connection::write_transaction(&mut conn, |c| {
                        if let Some((holder, epoch)) = &fence {
                            lease::check_in(c, holder, *epoch)?;
                        }
                        f(c, &mut outbox)
                    }),
                    Mode::Read => conn.transaction(|c| f(c, &mut outbox)),
                };
                match result {
                    Err(e) if e.is_retryable() && attempt < max_attempts => {
                        tracing::debug!(op, attempt, error = %e, "retrying transaction");
                        std::thread::sleep(Duration::from_millis(5 << attempt));
                        attempt += 1;
                    }
                    result => {
                        let elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
                        tracing::debug!(op, attempt, elapsed_ms, ok = result.is_ok(), "db op");
                        // Committed events ring their watchers; a rollback's don't.
                        let outbox = if result.is_ok() {
                            outbox
                        } else {
                            Outbox::default()
                        };
                        return Ok::<_, DatabaseError>((result, outbox));
                    }
                }
            }
        })
        .await
        .map_err(|e| DatabaseError::Task(e.to_string()))
        .and_then(|run| run);
        let ok = matches!(outcome, Ok((Ok(_), _)));
        self.metrics.record(op, started.elapsed(), ok);
        let (result, outbox) = outcome?;
        self.bell.deliver(outbox);
        result
    }

    /// Latency and errors of every named operation so far.
    pub fn op_metrics(&self) -> &OpMetrics {
        &self.metrics
    }

    /// Rings when a training gets new events (see [`EventBell`]).
    pub fn events_bell(&self) -> &EventBell {
        &self.bell
    }
}

/// Whether a transaction may write (see [`Persistence::transaction`]).
#[derive(Debug, Clone, Copy)]
enum Mode {
    Write,
    /// A write that needs no leadership (see [`Persistence::unfenced`]).
    Unfenced,
    Read,
}
