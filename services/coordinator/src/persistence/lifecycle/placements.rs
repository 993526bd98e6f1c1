//! Placing a training: the rank map of an attempt written with the state
//! change, the trainings that hold GPUs now, and the start of a restart.

use crate::model::{
    EventPayload, JobState, Placement, RankRecord, RankState, StateChange, Training, RESIZING,
};
use crate::persistence::connection::on_backend;
use crate::persistence::ranks::RankRow;
use crate::persistence::rows::{
    from_db_time, now, to_db_time, EventRow, NewTransitionRow, TrainingRow,
};
use crate::persistence::schema::{ranks, state_transitions, training_events, trainings};
use crate::persistence::{DatabaseError, DbConnection, LogicalError, Outbox, Persistence};
use diesel::prelude::*;
use std::collections::{HashMap, HashSet};

/// One placement of a batch: the training, where its ranks go, and the
/// reason its transition records.
#[derive(Debug, Clone)]
pub struct NewPlacement {
    pub training_id: String,
    pub placement: Placement,
    pub reason: String,
    /// It runs beyond its team's guarantee (on borrowed GPUs).
    pub borrowing: bool,
}

/// A training placed by [`Persistence::place_trainings`].
#[derive(Debug, Clone)]
pub struct Placed {
    /// As it is now: SCHEDULED at its new attempt.
    pub training: Training,
    /// When it entered the state it left (its wait for GPUs began then).
    pub waited_since: chrono::DateTime<chrono::Utc>,
}

/// Rows per multi-row insert: well under SQLite's 32,766 parameters.
const ROWS_PER_INSERT: usize = 1000;

/// Writes each placement's rank map and moves its training to SCHEDULED
/// (attempt + 1): one read of the batch's rows, one guarded update per
/// training (its state and event counter unchanged since that read, or it
/// is left out with a conflict), then the rank maps, transitions and events
/// of all of them in one multi-row insert each. A training that moved on
/// gets its own error and nothing of it is written; the answers follow
/// `batch`'s order.
fn place_batch_in(
    conn: &mut DbConnection,
    outbox: &mut Outbox,
    batch: &[NewPlacement],
) -> Result<Vec<Result<Placed, DatabaseError>>, DatabaseError> {
    let mut current = load_current(conn, batch)?;
    let at = now();
    let waited_since: Vec<Option<chrono::DateTime<chrono::Utc>>> = batch
        .iter()
        .map(|new| current.get(&new.training_id).map(|t| t.update_time))
        .collect();
    let mut out: Vec<Result<(JobState, Training), DatabaseError>> = batch
        .iter()
        .map(|new| match current.remove(&new.training_id) {
            None => Err(DatabaseError::Logical(LogicalError::TrainingNotFound(
                new.training_id.clone(),
            ))),
            Some(t) => scheduled(t, new, at),
        })
        .collect();
    // The guarded updates: one statement on PostgreSQL, a cheap in-process
    // statement per training on SQLite. One that matched no row moved on.
    let updated = write_scheduled(conn, &out, at)?;
    for entry in &mut out {
        if let Ok((_, t)) = entry {
            if !updated.contains(&t.id) {
                *entry = Err(DatabaseError::Conflict(format!("training {}", t.id)));
            }
        }
    }
    let placed: Vec<PlacedRow> = batch
        .iter()
        .zip(&out)
        .filter_map(|(new, t)| t.as_ref().ok().map(|(from, t)| (new, *from, t)))
        .collect();
    insert_ranks(conn, &placed, at)?;
    insert_transitions(conn, &placed, at)?;
    insert_events(conn, &placed, at)?;
    for (_, _, t) in &placed {
        outbox.event(&t.id, t.last_event_seq);
    }
    if !placed.is_empty() {
        outbox.state_change();
    }
    Ok(out
        .into_iter()
        .zip(waited_since)
        .map(|(r, since)| {
            r.map(|(_, training)| Placed {
                waited_since: since.unwrap_or(training.create_time),
                training,
            })
        })
        .collect())
}

/// A training of the batch that is placed: its command, the state it
/// leaves, and the training as placed.
type PlacedRow<'a> = (&'a NewPlacement, JobState, &'a Training);

/// The batch's trainings as they are now, by id.
fn load_current(
    conn: &mut DbConnection,
    batch: &[NewPlacement],
) -> Result<HashMap<String, Training>, DatabaseError> {
    let ids: Vec<&str> = batch.iter().map(|n| n.training_id.as_str()).collect();
    let mut current: HashMap<String, Training> = HashMap::with_capacity(batch.len());
    for chunk in ids.chunks(ROWS_PER_INSERT) {
        for row in trainings::table
            .filter(trainings::id.eq_any(chunk))
            .select(TrainingRow::as_select())
            .load(conn)?
        {
            let t = Training::try_from(row)?;
            current.insert(t.id.clone(), t);
        }
    }
    Ok(current)
}

/// The placed trainings' rank maps, in multi-row inserts.
fn insert_ranks(
    conn: &mut DbConnection,
    placed: &[PlacedRow],
    at: chrono::DateTime<chrono::Utc>,
) -> Result<(), DatabaseError> {
    let ranks: Vec<_> = placed
        .iter()
        .flat_map(|(new, _, t)| {
            new.placement.slots.iter().map(move |s| {
                (
                    ranks::training_id.eq(&t.id),
                    ranks::attempt.eq(t.attempt),
                    ranks::rank.eq(s.rank),
                    ranks::agent_id.eq(&s.agent_id),
                    ranks::gpu_uuid.eq(&s.gpu_uuid),
                    ranks::gpu_index.eq(s.gpu_index),
                    ranks::local_rank.eq(s.local_rank),
                    ranks::local_world_size.eq(s.local_world_size),
                    ranks::state.eq(RankState::Pending.as_str()),
                    ranks::update_time.eq(to_db_time(at)),
                )
            })
        })
        .collect();
    for chunk in ranks.chunks(ROWS_PER_INSERT) {
        on_backend!(conn, |c| diesel::insert_into(ranks::table)
            .values(chunk)
            .execute(c))?;
    }
    Ok(())
}

/// Their transitions to SCHEDULED.
fn insert_transitions(
    conn: &mut DbConnection,
    placed: &[PlacedRow],
    at: chrono::DateTime<chrono::Utc>,
) -> Result<(), DatabaseError> {
    let transitions: Vec<NewTransitionRow> = placed
        .iter()
        .map(|(_, from, t)| NewTransitionRow {
            training_id: &t.id,
            attempt: t.attempt,
            from_state: Some(from.as_str()),
            to_state: JobState::Scheduled.as_str(),
            reason: &t.state_reason,
            at: to_db_time(at),
        })
        .collect();
    for chunk in transitions.chunks(ROWS_PER_INSERT) {
        on_backend!(conn, |c| diesel::insert_into(state_transitions::table)
            .values(chunk)
            .execute(c))?;
    }
    Ok(())
}

/// Their state-change events.
fn insert_events(
    conn: &mut DbConnection,
    placed: &[PlacedRow],
    at: chrono::DateTime<chrono::Utc>,
) -> Result<(), DatabaseError> {
    let events: Vec<EventRow> = placed
        .iter()
        .map(|(_, from, t)| {
            let change = EventPayload::StateChange(StateChange {
                from: Some(*from),
                to: JobState::Scheduled,
                reason: t.state_reason.clone(),
            });
            EventRow {
                training_id: t.id.clone(),
                seq: t.last_event_seq,
                attempt: t.attempt,
                kind: change.kind(),
                payload_json: change.to_json(),
                event_time: to_db_time(at),
            }
        })
        .collect();
    for chunk in events.chunks(ROWS_PER_INSERT) {
        on_backend!(conn, |c| diesel::insert_into(training_events::table)
            .values(chunk)
            .execute(c))?;
    }
    Ok(())
}

/// A placement's training as it is once placed, with the state it leaves
/// (or why it cannot be placed); nothing written yet.
fn scheduled(
    current: Training,
    new: &NewPlacement,
    at: chrono::DateTime<chrono::Utc>,
) -> Result<(JobState, Training), DatabaseError> {
    let from = current.state;
    if !from.can_transition_to(JobState::Scheduled) {
        return Err(DatabaseError::Logical(LogicalError::IllegalTransition {
            id: current.id,
            from,
            to: JobState::Scheduled,
        }));
    }
    let placement = &new.placement;
    let world = placement.slots.len() as i32;
    // An elastic training re-formed after its resize notice says so.
    let reason = if current.state_reason.starts_with(RESIZING) {
        // The SAE holds its global batch; a program holds what it does.
        let batch = match &current.config {
            cohort_spec::Workload::Sae(_) => ", its global batch unchanged",
            cohort_spec::Workload::Program(_) => "",
        };
        format!(
            "RESIZED: {} -> {world} ranks from its checkpoint{batch}",
            current.world_size
        )
    } else {
        new.reason.clone()
    };
    let placed = Training {
        attempt: current.attempt + 1,
        world_size: world,
        distributed: world > 1,
        master_addr: Some(placement.master_addr.clone()),
        master_port: Some(i32::from(placement.master_port)),
        state: JobState::Scheduled,
        state_reason: reason,
        update_time: from_db_time(to_db_time(at)),
        attempt_time: Some(from_db_time(to_db_time(at))),
        borrowing: new.borrowing,
        last_event_seq: current.last_event_seq + 1,
        ..current
    };
    Ok((from, placed))
}

/// Writes the placed rows of `out`, each guarded by the state it leaves and
/// the event counter read with it; returns the ids of the rows written.
fn write_scheduled(
    conn: &mut DbConnection,
    out: &[Result<(JobState, Training), DatabaseError>],
    at: chrono::DateTime<chrono::Utc>,
) -> Result<HashSet<String>, DatabaseError> {
    let placed: Vec<&(JobState, Training)> = out.iter().filter_map(|r| r.as_ref().ok()).collect();
    let mut written = HashSet::with_capacity(placed.len());
    match conn {
        DbConnection::Pg(pg) => {
            for chunk in placed.chunks(ROWS_PER_UPDATE) {
                written.extend(update_all_pg(pg, chunk, at)?);
            }
        }
        DbConnection::Sqlite(_) => {
            for (from, t) in placed {
                let updated = diesel::update(
                    trainings::table
                        .filter(trainings::id.eq(&t.id))
                        .filter(trainings::state.eq(from.as_str()))
                        .filter(trainings::last_event_seq.eq(t.last_event_seq - 1)),
                )
                .set((
                    trainings::attempt.eq(t.attempt),
                    trainings::world_size.eq(t.world_size),
                    trainings::distributed.eq(t.distributed),
                    trainings::master_addr.eq(&t.master_addr),
                    trainings::master_port.eq(t.master_port),
                    trainings::state.eq(JobState::Scheduled.as_str()),
                    trainings::state_reason.eq(&t.state_reason),
                    trainings::update_time.eq(to_db_time(at)),
                    trainings::attempt_time.eq(to_db_time(at)),
                    trainings::borrowing.eq(t.borrowing),
                    trainings::last_event_seq.eq(t.last_event_seq),
                ))
                .execute(conn)?;
                if updated == 1 {
                    written.insert(t.id.clone());
                }
            }
        }
    }
    Ok(written)
}

/// Placements per guarded UPDATE on PostgreSQL (9 parameters each).
const ROWS_PER_UPDATE: usize = 500;

#[derive(QueryableByName)]
struct WrittenId {
    #[diesel(sql_type = diesel::sql_types::Text)]
    id: String,
}

/// PostgreSQL: the guarded updates of `rows` in one statement (a round trip
/// per training was most of a burst's time there).
fn update_all_pg(
    pg: &mut diesel::PgConnection,
    rows: &[&(JobState, Training)],
    at: chrono::DateTime<chrono::Utc>,
) -> Result<Vec<String>, DatabaseError> {
    use diesel::sql_types::{BigInt, Bool, Integer, Text, Timestamp};
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let values: Vec<String> = (0..rows.len())
        .map(|i| {
            let p = 2 + i * 9;
            format!(
                "(${}::text, ${}::text, ${}::bigint, ${}::int, ${}::int, ${}::text, ${}::int, ${}::text, ${}::bool)",
                p,
                p + 1,
                p + 2,
                p + 3,
                p + 4,
                p + 5,
                p + 6,
                p + 7,
                p + 8
            )
        })
        .collect();
    let sql = format!(
        "UPDATE trainings AS t SET attempt = v.attempt, world_size = v.world, \
         distributed = v.world > 1, master_addr = v.addr, master_port = v.port, \
         state = '{scheduled}', state_reason = v.reason, update_time = $1, \
         attempt_time = $1, borrowing = v.borrowing, last_event_seq = v.seq + 1 \
         FROM (VALUES {values}) AS v(id, from_state, seq, attempt, world, addr, port, reason, borrowing) \
         WHERE t.id = v.id AND t.state = v.from_state AND t.last_event_seq = v.seq \
         RETURNING t.id",
        scheduled = JobState::Scheduled.as_str(),
        values = values.join(", ")
    );
    let mut query = diesel::sql_query(sql)
        .into_boxed::<diesel::pg::Pg>()
        .bind::<Timestamp, _>(to_db_time(at));
    for (from, t) in rows {
        query = query
            .bind::<Text, _>(t.id.clone())
            .bind::<Text, _>(from.as_str())
            .bind::<BigInt, _>(t.last_event_seq - 1)
            .bind::<Integer, _>(t.attempt)
            .bind::<Integer, _>(t.world_size)
            .bind::<Text, _>(t.master_addr.clone().unwrap_or_default())
            .bind::<Integer, _>(t.master_port.unwrap_or_default())
            .bind::<Text, _>(t.state_reason.clone())
            .bind::<Bool, _>(t.borrowing);
    }
    Ok(query
        .load::<WrittenId>(pg)?
        .into_iter()
        .map(|w| w.id)
        .collect())
}

impl Persistence {
    /// Places a batch in one transaction (see [`place_batch_in`]): one that
    /// moved on meanwhile (cancelled, placed by another pass) gets its own
    /// error and the others are placed; a database failure places none.
    pub async fn place_trainings(
        &self,
        batch: Vec<NewPlacement>,
    ) -> Result<Vec<Result<Placed, DatabaseError>>, DatabaseError> {
        self.transaction_noting("place_trainings", move |c, out| {
            place_batch_in(c, out, &batch)
        })
        .await
    }

    /// The rendezvous ports in use on each of `hosts`: those of the
    /// trainings whose current attempt holds GPUs (SCHEDULED or RUNNING)
    /// with rank 0 there.
    pub async fn master_ports_on(
        &self,
        hosts: Vec<String>,
    ) -> Result<Vec<(String, i32)>, DatabaseError> {
        self.read("master_ports_on", move |c| {
            Ok(trainings::table
                .filter(
                    trainings::state
                        .eq_any([JobState::Scheduled.as_str(), JobState::Running.as_str()]),
                )
                .filter(trainings::master_addr.eq_any(&hosts))
                .select((trainings::master_addr, trainings::master_port))
                .load::<(Option<String>, Option<i32>)>(c)?
                .into_iter()
                .filter_map(|(host, port)| Some((host?, port?)))
                .collect())
        })
        .await
    }

    /// Trainings whose current attempt holds GPUs (SCHEDULED or RUNNING), with
    /// that attempt's ranks: what the coordinator re-adopts after a restart.
    pub async fn active_placements(
        &self,
    ) -> Result<Vec<(Training, Vec<RankRecord>)>, DatabaseError> {
        self.read("active_placements", |c| {
            // Two queries whatever the number of trainings: their rows, then
            // the ranks of all of them (kept for each one's current attempt).
            let active: Vec<Training> = trainings::table
                .filter(
                    trainings::state
                        .eq_any([JobState::Scheduled.as_str(), JobState::Running.as_str()]),
                )
                .select(TrainingRow::as_select())
                .load(c)?
                .into_iter()
                .map(Training::try_from)
                .collect::<Result<_, _>>()?;
            let ids: Vec<&str> = active.iter().map(|t| t.id.as_str()).collect();
            let mut ranks: HashMap<String, Vec<RankRecord>> = HashMap::new();
            for row in ranks::table
                .filter(ranks::training_id.eq_any(&ids))
                .order((ranks::training_id.asc(), ranks::rank.asc()))
                .select(RankRow::as_select())
                .load::<RankRow>(c)?
            {
                ranks
                    .entry(row.training_id.clone())
                    .or_default()
                    .push(RankRecord::try_from(row)?);
            }
            Ok(active
                .into_iter()
                .map(|t| {
                    let current = ranks
                        .remove(&t.id)
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|r| r.attempt == t.attempt)
                        .collect();
                    (t, current)
                })
                .collect())
        })
        .await
    }
}
