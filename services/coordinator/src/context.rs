//! What every service and background task shares: the database, the live
//! fleet, the job runner, telemetry history, alerts and the background
//! tasks. Cheap to clone.

use crate::fleet::Fleet;
use crate::jobs::{JobSettings, Jobs};
use crate::persistence::Persistence;

/// A boxed stream (what server-streaming RPCs answer with).
pub type BoxStream<T> = std::pin::Pin<Box<dyn tokio_stream::Stream<Item = T> + Send + 'static>>;

/// What every service shares. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Context {
    pub db: Persistence,
    /// The live agents, GPU holds and telemetry fan-out.
    pub fleet: Fleet,
    /// The scheduler and job runner.
    pub jobs: Jobs,
    /// GPU telemetry history: settings, clock and writer counters (its
    /// writer and retention tasks run in `server::run`).
    pub history: crate::history::History,
    /// Active alerts and their live feed (the alert task runs in `server::run`).
    pub alerts: crate::alerts::AlertHub,
    /// Open WatchGpuMetrics streams and their lag.
    pub watchers: crate::fleet::WatcherStats,
    /// Agent messages refused for naming what the agent does not own.
    pub refusals: crate::fleet::Refusals,
    /// The background tasks: one token stops them, one tracker waits for them.
    pub tasks: crate::tasks::Tasks,
    /// Who may call what (`--auth`, `--agent-ca`); the layer and the admin
    /// service use it.
    pub auth: std::sync::Arc<crate::auth::Authenticator>,
    /// Whether this coordinator leads (always, on SQLite).
    pub leadership: crate::leader::Leadership,
    /// How a standby forwards changes to the leader (off by default).
    pub forwarder: std::sync::Arc<crate::leader::forward::Forwarder>,
    /// Per team, the variables its checkpoint storage is read with
    /// (`--team-env-file TEAM=FILE`); other teams' use the coordinator's own
    /// AWS_* environment.
    pub storage_env: std::sync::Arc<crate::export::source::TeamEnv>,
    /// `--agent-ca` as reloaded: agent sessions it no longer trusts end.
    pub agent_ca: crate::tls::AgentCa,
    /// The operator's webhooks and every hook's deliveries.
    pub webhooks: crate::webhooks::Webhooks,
    /// Which tracker each team's trainings go to, and how their runs fare.
    pub tracking: crate::tracking::Tracking,
    /// Programs' code snapshots.
    pub code: crate::code::CodeStore,
    /// Wakes the sweeps' searcher (a sweep was created) before its next pass.
    pub sweeps_wake: std::sync::Arc<tokio::sync::Notify>,
    /// Turns true when the server stops: every long-lived stream ends then,
    /// so a graceful shutdown is not held open by agents and watchers.
    stopping: std::sync::Arc<tokio::sync::watch::Sender<bool>>,
}

impl Context {
    pub fn new(db: Persistence) -> Self {
        Self::with_settings(db, JobSettings::default())
    }

    pub fn with_settings(db: Persistence, settings: JobSettings) -> Self {
        let fleet = Fleet::new();
        let tasks = crate::tasks::Tasks::default();
        let jobs = Jobs::new(db.clone(), fleet.clone(), settings, tasks.clone());
        let stopping = std::sync::Arc::new(tokio::sync::watch::channel(false).0);
        let auth = crate::auth::Authenticator::new(Default::default(), db.clone());
        Self {
            auth,
            db,
            fleet,
            jobs,
            history: crate::history::History::default(),
            alerts: crate::alerts::AlertHub::default(),
            watchers: Default::default(),
            refusals: Default::default(),
            tasks,
            leadership: Default::default(),
            forwarder: Default::default(),
            storage_env: Default::default(),
            agent_ca: Default::default(),
            webhooks: Default::default(),
            tracking: Default::default(),
            code: Default::default(),
            sweeps_wake: Default::default(),
            stopping,
        }
    }

    /// Read each team's checkpoint storage with its own variables.
    pub fn with_storage_env(mut self, env: crate::export::source::TeamEnv) -> Self {
        self.storage_env = std::sync::Arc::new(env);
        self
    }

    /// End agent sessions that a reloaded `--agent-ca` no longer trusts.
    pub fn with_agent_ca(mut self, agent_ca: crate::tls::AgentCa) -> Self {
        self.agent_ca = agent_ca;
        self
    }

    /// Keep programs' code snapshots here.
    pub fn with_code(mut self, code: crate::code::CodeStore) -> Self {
        self.code = code;
        self
    }

    /// Announce to these webhooks (the operator's, and how deliveries go).
    pub fn with_webhooks(mut self, webhooks: crate::webhooks::Webhooks) -> Self {
        self.webhooks = webhooks;
        self
    }

    /// Track trainings in MLflow as these settings say.
    pub fn with_tracking(mut self, settings: crate::tracking::TrackingSettings) -> Self {
        self.tracking = crate::tracking::Tracking::new(settings);
        self
    }

    /// Lead only when elected (coordinators sharing PostgreSQL).
    pub fn with_leadership(mut self, leadership: crate::leader::Leadership) -> Self {
        self.leadership = leadership;
        self
    }

    /// Forward changes that reach this coordinator as a standby.
    pub fn with_forwarding(mut self, settings: crate::leader::forward::ForwardSettings) -> Self {
        self.forwarder = std::sync::Arc::new(crate::leader::forward::Forwarder::new(settings));
        self
    }

    /// Evaluate alerts with these thresholds instead of the defaults.
    pub fn with_alert_settings(mut self, settings: crate::alerts::AlertSettings) -> Self {
        self.alerts = crate::alerts::AlertHub::new(settings);
        self
    }

    /// Authenticate callers this way (the default: `--auth none`, agents
    /// without certificates).
    pub fn with_auth(mut self, settings: crate::auth::AuthSettings) -> Self {
        self.auth = crate::auth::Authenticator::new(settings, self.db.clone());
        self
    }

    /// Keep GPU telemetry history with these settings and this clock.
    pub fn with_history(mut self, history: crate::history::History) -> Self {
        self.history = history;
        self
    }

    /// Told when the server stops (see [`stopped`]).
    pub fn stopping(&self) -> tokio::sync::watch::Receiver<bool> {
        self.stopping.subscribe()
    }

    /// End every long-lived stream (the server is stopping).
    pub fn stop_streams(&self) {
        self.stopping.send_replace(true);
    }

    /// `stream`, ended when the server stops.
    pub fn until_stopping<S>(&self, stream: S) -> BoxStream<S::Item>
    where
        S: tokio_stream::Stream + Send + 'static,
        S::Item: Send,
    {
        use tokio_stream::StreamExt;
        let stopping = self.stopping.subscribe();
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            let stopped = stopped(stopping);
            tokio::pin!(stream);
            tokio::pin!(stopped);
            loop {
                tokio::select! {
                    _ = &mut stopped => return,
                    _ = tx.closed() => return,
                    item = stream.next() => match item {
                        Some(item) => if tx.send(item).await.is_err() { return },
                        None => return,
                    },
                }
            }
        });
        Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
    }
}

/// Resolves once `stopping` says true (the server is stopping); never when
/// its sender is gone without saying so.
pub(crate) async fn stopped(mut stopping: tokio::sync::watch::Receiver<bool>) {
    while !*stopping.borrow_and_update() {
        if stopping.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
