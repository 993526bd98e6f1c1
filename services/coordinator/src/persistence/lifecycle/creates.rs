//! What CreateTraining writes, and its group commit.
//!
//! Concurrent creates queue for one worker, which writes everything that
//! waits (up to [`MAX_BATCH`]) as one transaction: one look-up of the
//! batch's request ids, one queue count per team, and one multi-row insert
//! each of trainings, transitions, events and audit rows. So a burst costs
//! a handful of statements and one commit instead of a dozen statements and
//! a commit per create. A create refused on its own merits (request id
//! conflict, full queue) writes nothing and the others go on; a batch that
//! fails as a whole is answered with the same error when the database is
//! out of reach or this coordinator does not lead, and otherwise written
//! again one create per transaction, so each caller gets its own outcome.

use super::queue_counts::QueueCounts;
use crate::model::{AuditEntry, GpuRequest, JobState, Training};
use crate::persistence::rows::{now, request_key, to_db_time, TrainingRow};
use crate::persistence::schema::{team_quotas, trainings};
use crate::persistence::{DatabaseError, DbConnection, LogicalError, Outbox, Persistence};
use cohort_spec::Workload;
use diesel::prelude::*;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// The most creates one transaction writes.
const MAX_BATCH: usize = 256;
/// Creates that may wait for the worker before callers wait to hand theirs over.
const QUEUE_DEPTH: usize = 4 * MAX_BATCH;

/// What CreateTraining persists.
#[derive(Debug, Clone)]
pub struct NewTraining {
    /// Idempotency key: a second create with the same key returns the first training.
    pub request_id: Option<String>,
    pub display_name: String,
    pub config: Workload,
    pub gpu_request: GpuRequest,
    pub priority: i32,
    /// Its priority class's name (the class set `priority`), or "".
    pub priority_class: String,
    /// May it borrow idle quota of other teams.
    pub borrow: bool,
    pub max_restarts: i32,
    /// The creating call's W3C traceparent, when traced.
    pub trace_context: Option<String>,
    /// The team it belongs to and who creates it.
    pub team: String,
    pub creator: String,
    /// Its labels (checked by the caller).
    pub labels: std::collections::BTreeMap<String, String>,
    /// The audit row of the create, written in its transaction.
    pub audit: Option<AuditEntry>,
    /// Refuse ([`LogicalError::QueueFull`]) when the team already has its
    /// cap of QUEUED trainings: its own (`team_quotas.max_queued`), else
    /// this default; `None`: no cap.
    pub max_queued: Option<i64>,
}

/// The result of [`Persistence::create_training`].
#[derive(Debug, Clone)]
pub struct Created {
    pub training: Training,
    /// False when the request_id matched an existing training (nothing written).
    pub created: bool,
}

fn new_training_id() -> String {
    format!("trn-{}", uuid::Uuid::new_v4().simple())
}

/// A team's QUEUED trainings and its cap, as the batch goes on.
struct TeamQueue {
    queued: i64,
    cap: i64,
}

impl TeamQueue {
    /// On PostgreSQL a per-team advisory lock (held to the end of the
    /// transaction) makes concurrent writers count one after the other;
    /// SQLite's writers are serial already.
    /// `known`: the count the worker kept from its last batch, when still
    /// true (see [`super::queue_counts`]); else it is counted.
    fn load(
        conn: &mut DbConnection,
        team: &str,
        default: i64,
        known: Option<i64>,
    ) -> Result<Self, DatabaseError> {
        let own: Option<i32> =
            match conn {
                // The lock and the team's own cap in one round trip.
                DbConnection::Pg(pg) => diesel::sql_query(
                    "SELECT q.max_queued FROM (SELECT pg_advisory_xact_lock(hashtext($1))) AS l \
                     LEFT JOIN team_quotas AS q ON q.team = $2",
                )
                .bind::<diesel::sql_types::Text, _>(format!("cohort-queue/{team}"))
                .bind::<diesel::sql_types::Text, _>(team)
                .get_result::<OwnCap>(pg)?
                .max_queued,
                DbConnection::Sqlite(_) => team_quotas::table
                    .find(team)
                    .select(team_quotas::max_queued)
                    .first::<Option<i32>>(conn)
                    .optional()?
                    .flatten(),
            };
        let queued = match known {
            Some(n) => n,
            None => trainings::table
                .filter(trainings::team.eq(team))
                .filter(trainings::state.eq(JobState::Queued.as_str()))
                .count()
                .get_result(conn)?,
        };
        Ok(Self {
            queued,
            cap: own.map_or(default, i64::from),
        })
    }
}

/// A team's own cap of QUEUED trainings, when it has one.
#[derive(diesel::QueryableByName)]
struct OwnCap {
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Integer>)]
    max_queued: Option<i32>,
}

/// The stored trainings of the batch's request ids, by key.
fn stored_by_key(
    conn: &mut DbConnection,
    batch: &[NewTraining],
) -> Result<HashMap<String, TrainingRow>, DatabaseError> {
    let keys: Vec<String> = batch
        .iter()
        .filter_map(|n| n.request_id.as_deref().map(|id| request_key(&n.team, id)))
        .collect();
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    Ok(trainings::table
        .filter(trainings::request_id.eq_any(&keys))
        .select(TrainingRow::as_select())
        .load(conn)?
        .into_iter()
        .filter_map(|row| row.request_id.clone().map(|key| (key, row)))
        .collect())
}

/// A replay of `row` for `new`, or the conflict when the request differs.
fn replay(
    row: &TrainingRow,
    new: &NewTraining,
    config_json: &str,
    gpu_request_json: &str,
) -> Result<Created, DatabaseError> {
    let same = row.config_json == config_json
        && row.gpu_request_json == gpu_request_json
        && row.priority == new.priority
        && row.priority_class == new.priority_class
        && row.borrow == new.borrow
        && row.max_restarts == new.max_restarts
        && row.display_name == new.display_name;
    if !same {
        return Err(DatabaseError::Logical(LogicalError::RequestIdConflict {
            request_id: new.request_id.clone().unwrap_or_default(),
            existing: row.id.clone(),
        }));
    }
    Ok(Created {
        training: row.clone().try_into()?,
        created: false,
    })
}

fn queued_row(new: &NewTraining, key: Option<String>, config_json: String) -> TrainingRow {
    let at = to_db_time(now());
    TrainingRow {
        id: new_training_id(),
        request_id: key,
        display_name: new.display_name.clone(),
        config_json,
        gpu_request_json: serde_json::to_string(&new.gpu_request).expect("gpu request serialises"),
        state: JobState::Queued.as_str().to_string(),
        state_reason: "waiting to be scheduled".to_string(),
        world_size: 0,
        distributed: false,
        priority: new.priority,
        attempt: 0,
        restart_count: 0,
        max_restarts: new.max_restarts,
        master_addr: None,
        master_port: None,
        // The "created" state change below is its first event.
        last_event_seq: 1,
        create_time: at,
        update_time: at,
        start_time: None,
        end_time: None,
        trace_context: new.trace_context.clone(),
        team: new.team.clone(),
        creator: new.creator.clone(),
        labels_json: serde_json::to_string(&new.labels).expect("labels serialise"),
        priority_class: new.priority_class.clone(),
        borrow: new.borrow,
        borrowing: false,
        preemption_count: 0,
        attempt_time: None,
        notice_saves: false,
        resize_count: 0,
    }
}

/// What a batch wrote: one outcome per create, in order, and each capped
/// team's QUEUED count after it.
pub(in crate::persistence) struct BatchOutcome {
    pub outcomes: Vec<Result<Created, DatabaseError>>,
    pub queued: HashMap<String, i64>,
    /// Whether any training was created (the commit changes the state epoch).
    pub created: bool,
}

/// Writes `batch` inside the caller's transaction and returns one outcome
/// per create, in order: a new QUEUED training with its first transition,
/// event and audit row; the stored training of a replayed request_id; or
/// the refusal of this create alone (it wrote nothing). `known` holds
/// QUEUED counts still true from the worker's last batch.
pub(in crate::persistence) fn create_batch_in(
    conn: &mut DbConnection,
    out: &mut Outbox,
    batch: &[NewTraining],
    known: &HashMap<String, i64>,
) -> Result<BatchOutcome, DatabaseError> {
    let mut stored = stored_by_key(conn, batch)?;
    let mut queues: HashMap<&str, TeamQueue> = HashMap::new();
    let mut rows: Vec<TrainingRow> = Vec::new();
    let mut audits: Vec<AuditEntry> = Vec::new();
    let mut outcomes = Vec::with_capacity(batch.len());
    for new in batch {
        let config_json = new.config.to_json();
        let key = new
            .request_id
            .as_deref()
            .map(|id| request_key(&new.team, id));
        if let Some(row) = key.as_ref().and_then(|k| stored.get(k)) {
            let gpu_request_json =
                serde_json::to_string(&new.gpu_request).expect("gpu request serialises");
            outcomes.push(replay(row, new, &config_json, &gpu_request_json));
            continue;
        }
        match (new.max_queued, queues.entry(new.team.as_str())) {
            (Some(default), entry) => {
                let queue = match entry {
                    Entry::Occupied(e) => e.into_mut(),
                    Entry::Vacant(e) => {
                        let known = known.get(&new.team).copied();
                        e.insert(TeamQueue::load(conn, &new.team, default, known)?)
                    }
                };
                if queue.queued >= queue.cap {
                    outcomes.push(Err(DatabaseError::Logical(LogicalError::QueueFull {
                        team: new.team.clone(),
                        queued: queue.queued,
                    })));
                    continue;
                }
                queue.queued += 1;
            }
            // Uncapped, but it counts against the team's capped creates after it.
            (None, Entry::Occupied(mut e)) => e.get_mut().queued += 1,
            (None, Entry::Vacant(_)) => {}
        }
        let row = queued_row(new, key.clone(), config_json);
        if let Some(audit) = &new.audit {
            audits.push(AuditEntry {
                target: row.id.clone(),
                ..audit.clone()
            });
        }
        outcomes.push(Ok(Created {
            training: row.clone().try_into()?,
            created: true,
        }));
        if let Some(key) = key {
            stored.insert(key, row.clone());
        }
        rows.push(row);
    }
    super::queued_rows::insert(conn, out, &rows, &audits, now())?;
    Ok(BatchOutcome {
        outcomes,
        queued: queues
            .into_iter()
            .map(|(team, q)| (team.to_string(), q.queued))
            .collect(),
        created: !rows.is_empty(),
    })
}

/// A create waiting for the worker, and where its outcome goes.
struct Pending {
    new: NewTraining,
    reply: oneshot::Sender<Result<Created, DatabaseError>>,
}

/// The queue of creates in front of the worker that writes them.
#[derive(Debug)]
pub(in crate::persistence) struct CreateQueue {
    tx: mpsc::Sender<Pending>,
}

impl CreateQueue {
    /// Starts the worker on the current runtime. It ends when the queue is
    /// dropped, so `db` must not hold this queue (see [`Persistence::detached`]).
    pub(in crate::persistence) fn start(db: Persistence) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
        tokio::spawn(work(db, rx));
        Self { tx }
    }

    /// Hands `new` to the worker and waits for its outcome.
    pub(in crate::persistence) async fn submit(
        &self,
        new: NewTraining,
    ) -> Result<Created, DatabaseError> {
        let (reply, outcome) = oneshot::channel();
        self.tx
            .send(Pending { new, reply })
            .await
            .map_err(|_| DatabaseError::Task("the create queue is closed".into()))?;
        outcome
            .await
            .map_err(|_| DatabaseError::Task("the create worker ended".into()))?
    }
}

async fn work(db: Persistence, mut rx: mpsc::Receiver<Pending>) {
    let mut waiting = Vec::with_capacity(MAX_BATCH);
    let mut counts = QueueCounts::default();
    while rx.recv_many(&mut waiting, MAX_BATCH).await > 0 {
        let batch = std::mem::take(&mut waiting);
        tracing::debug!(creates = batch.len(), "writing a batch of creates");
        write(&db, batch, &mut counts).await;
    }
}

/// Writes one batch and answers each of its callers.
///
/// A batch of one goes the same way: alone, it would count its team's
/// QUEUED trainings afresh (at 20,000 queued, most of its time on
/// PostgreSQL) and make the next batch count again.
async fn write(db: &Persistence, batch: Vec<Pending>, counts: &mut QueueCounts) {
    let before = db.events_bell().state_epoch();
    let known = Arc::new(counts.known(before));
    let news: Arc<Vec<NewTraining>> = Arc::new(batch.iter().map(|p| p.new.clone()).collect());
    let carried = known.clone();
    // Named by size, as the operation metrics show them.
    let op = if batch.len() == 1 {
        "create_training"
    } else {
        "create_trainings"
    };
    let written = db
        .transaction_noting(op, move |c, out| create_batch_in(c, out, &news, &carried))
        .await;
    match written {
        Ok(done) => {
            let after = db.events_bell().state_epoch();
            let known = Arc::try_unwrap(known).unwrap_or_else(|k| (*k).clone());
            counts.after_batch(before, known, done.queued, done.created, after);
            for (pending, outcome) in batch.into_iter().zip(done.outcomes) {
                let _ = pending.reply.send(outcome);
            }
        }
        Err(e) if e.is_shared() => {
            counts.forget();
            for pending in batch {
                let _ = pending.reply.send(Err(e.replica()));
            }
        }
        Err(e) => {
            counts.forget();
            tracing::warn!(error = %e, creates = batch.len(), "a batch of creates failed; writing them one by one");
            for Pending { new, reply } in batch {
                let _ = reply.send(create_one(db, new).await);
            }
        }
    }
}

/// One create in its own transaction. A concurrent create with the same
/// request_id (another coordinator's, or a batch that failed) that won the
/// race makes the insert a unique violation: the second run finds its training.
async fn create_one(db: &Persistence, new: NewTraining) -> Result<Created, DatabaseError> {
    let retry = new.request_id.is_some();
    let news = Arc::new(vec![new]);
    let run = || {
        let batch = news.clone();
        async move {
            db.transaction_noting("create_training", move |c, out| {
                create_batch_in(c, out, &batch, &HashMap::new())
            })
            .await?
            .outcomes
            .pop()
            .ok_or_else(|| DatabaseError::Invariant("a create without an outcome".into()))?
        }
    };
    match run().await {
        Err(e) if e.is_unique_violation() && retry => run().await,
        outcome => outcome,
    }
}

impl Persistence {
    /// Creates a QUEUED training with its first transition and event, or, when
    /// `request_id` names an existing training with the same config and GPU
    /// request, returns that one (`created: false`). The same request_id with
    /// a different request is [`LogicalError::RequestIdConflict`].
    /// Concurrent creates are committed together (see the module).
    pub async fn create_training(&self, new: NewTraining) -> Result<Created, DatabaseError> {
        self.creates
            .get_or_init(|| CreateQueue::start(self.detached()))
            .submit(new)
            .await
    }
}
