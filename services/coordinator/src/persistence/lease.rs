//! The leader lease of coordinators sharing one PostgreSQL database, and the
//! fence every leader write passes.
//!
//! One row, `coordinator_lease`: who holds it, the URL it advertises, its
//! fencing epoch and when it expires, on the database's clock (`now()`), so
//! coordinators' clocks never have to agree. A standby takes the row once
//! it has expired and raises the epoch; the leader renews it. Every write
//! transaction of a fenced [`Persistence`] first reads the row `FOR KEY
//! SHARE` and goes on only if it still names this coordinator at its epoch.
//! A takeover locks the row `FOR UPDATE` before changing it, so it waits for
//! writes already past the check, and a write that checks after it sees the
//! new epoch and is refused, in the same transaction as the write it guards.
//!
//! The leader's renewals (every second) change only `expires_at`, which
//! takes PostgreSQL's `FOR NO KEY UPDATE` lock: compatible with `FOR KEY
//! SHARE`, so a renewal neither waits for the writes in flight nor makes
//! new ones queue behind it. (With `FOR SHARE` it did both: every second
//! the writes stalled until the slowest one in flight committed, the tail
//! of CreateTraining under load.)
//!
//! Raw SQL on purpose: PostgreSQL only (SQLite has one coordinator, held by
//! [`super::exclusive`]), and `timestamptz` arithmetic on the server's clock.

use super::{DatabaseError, DbConnection, Persistence};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Double, Text};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The lease row as a standby reads it.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct LeaseRow {
    #[diesel(sql_type = Text)]
    pub holder: String,
    #[diesel(sql_type = Text)]
    pub advertise: String,
    #[diesel(sql_type = BigInt)]
    pub epoch: i64,
    /// Not expired yet, on the database's clock.
    #[diesel(sql_type = Bool)]
    pub live: bool,
}

#[derive(Debug, QueryableByName)]
struct Epoch {
    #[diesel(sql_type = BigInt)]
    epoch: i64,
}

/// What the fence lets through: nothing (a standby), or the writes of one
/// holder at one epoch (the leader).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FenceState {
    Standby,
    Leading { holder: String, epoch: i64 },
}

/// Shared between the elector, which moves it, and every clone of a fenced
/// [`Persistence`], whose writes pass it.
#[derive(Debug)]
pub struct Fence {
    state: Mutex<FenceState>,
}

impl Default for Fence {
    fn default() -> Self {
        Self {
            state: Mutex::new(FenceState::Standby),
        }
    }
}

impl Fence {
    pub fn state(&self) -> FenceState {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn set(&self, state: FenceState) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = state;
    }
}

pub(super) fn pg(conn: &mut DbConnection) -> Result<&mut diesel::PgConnection, DatabaseError> {
    match conn {
        DbConnection::Pg(c) => Ok(c),
        DbConnection::Sqlite(_) => Err(DatabaseError::Invariant(
            "the leader lease needs PostgreSQL; a coordinator on SQLite leads alone".into(),
        )),
    }
}

/// Inside a write transaction: refused unless the lease still names
/// `holder` at `epoch`. Holds the row FOR KEY SHARE to the end of the
/// transaction, so a takeover (FOR UPDATE) waits for this write to commit;
/// a renewal does not.
pub(super) fn check_in(
    conn: &mut DbConnection,
    holder: &str,
    epoch: i64,
) -> Result<(), DatabaseError> {
    let rows: Vec<Epoch> = diesel::sql_query(
        "SELECT epoch FROM coordinator_lease \
         WHERE id = 1 AND holder = $1 AND epoch = $2 FOR KEY SHARE",
    )
    .bind::<Text, _>(holder)
    .bind::<BigInt, _>(epoch)
    .load(pg(conn)?)?;
    if rows.is_empty() {
        return Err(DatabaseError::Deposed { epoch });
    }
    Ok(())
}

fn seconds(d: Duration) -> f64 {
    d.as_secs_f64()
}

impl Persistence {
    /// Takes the lease for `ttl` if it is free or expired, raising the
    /// epoch; `Some(epoch)` when it was taken.
    pub async fn campaign(
        &self,
        holder: &str,
        advertise: &str,
        ttl: Duration,
    ) -> Result<Option<i64>, DatabaseError> {
        let (holder, advertise) = (holder.to_string(), advertise.to_string());
        self.unfenced("lease_campaign", move |c| {
            // FOR UPDATE conflicts with the writes' FOR KEY SHARE: the
            // takeover waits for the writes past the old leader's check.
            diesel::sql_query("SELECT 1 FROM coordinator_lease WHERE id = 1 FOR UPDATE")
                .execute(pg(c)?)?;
            let won: Vec<Epoch> = diesel::sql_query(
                "UPDATE coordinator_lease SET holder = $1, advertise = $2, epoch = epoch + 1, \
                 expires_at = now() + make_interval(secs => $3) \
                 WHERE id = 1 AND (expires_at <= now() OR holder = '') RETURNING epoch",
            )
            .bind::<Text, _>(&holder)
            .bind::<Text, _>(&advertise)
            .bind::<Double, _>(seconds(ttl))
            .load(pg(c)?)?;
            Ok(won.first().map(|e| e.epoch))
        })
        .await
    }

    /// Extends the lease of `holder` at `epoch` by `ttl` from now; `false`
    /// when another coordinator holds it (this one is deposed).
    pub async fn renew_lease(
        &self,
        holder: &str,
        epoch: i64,
        ttl: Duration,
    ) -> Result<bool, DatabaseError> {
        let holder = holder.to_string();
        self.unfenced("lease_renew", move |c| {
            let kept: Vec<Epoch> = diesel::sql_query(
                "UPDATE coordinator_lease SET expires_at = now() + make_interval(secs => $3) \
                 WHERE id = 1 AND holder = $1 AND epoch = $2 RETURNING epoch",
            )
            .bind::<Text, _>(&holder)
            .bind::<BigInt, _>(epoch)
            .bind::<Double, _>(seconds(ttl))
            .load(pg(c)?)?;
            Ok(!kept.is_empty())
        })
        .await
    }

    /// Gives the lease up (a graceful stop): a standby takes it at its next
    /// try instead of waiting for it to expire.
    pub async fn release_lease(&self, holder: &str, epoch: i64) -> Result<(), DatabaseError> {
        let holder = holder.to_string();
        self.unfenced("lease_release", move |c| {
            diesel::sql_query(
                "UPDATE coordinator_lease SET expires_at = TIMESTAMPTZ '1970-01-01 00:00:00+00' \
                 WHERE id = 1 AND holder = $1 AND epoch = $2",
            )
            .bind::<Text, _>(&holder)
            .bind::<BigInt, _>(epoch)
            .execute(pg(c)?)?;
            Ok(())
        })
        .await
    }

    /// The lease as it stands.
    pub async fn lease(&self) -> Result<LeaseRow, DatabaseError> {
        self.read("lease_read", |c| {
            diesel::sql_query(
                "SELECT holder, advertise, epoch, expires_at > now() AS live \
                 FROM coordinator_lease WHERE id = 1",
            )
            .get_result::<LeaseRow>(pg(c)?)
            .map_err(DatabaseError::from)
        })
        .await
    }

    /// This handle, with every write passing `fence` first.
    pub fn fenced(mut self, fence: Arc<Fence>) -> Self {
        self.fence = Some(fence);
        // Creates go through a worker of their own, which must pass the fence too.
        self.detached()
    }
}
