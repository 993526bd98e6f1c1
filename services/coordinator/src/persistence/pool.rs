//! The connection pool's manager: opens connections of the chosen backend
//! and, at check-out, tests only those that sat idle.
//!
//! Testing every check-out (r2d2's default, a `SELECT 1`) costs a round
//! trip per operation: on PostgreSQL one of the dozen a batch of creates
//! makes, each of them a wake-up of the coordinator and of a backend on
//! busy cores. A connection handed back less than [`FRESH`] ago was
//! working then and is handed out again untested (HikariCP's
//! `aliveBypassWindowMs` is the same idea, 500 ms); one idle longer — the
//! database may have restarted or ended the session meanwhile — is tested
//! and replaced when it fails. A connection whose operation found its
//! session gone never goes back: diesel then reports the transaction
//! state unknown, so [`ManageConnection::has_broken`] says it is broken.

use super::connection::{DatabaseTarget, DbConnection};
use diesel::connection::SimpleConnection;
use diesel::r2d2::ManageConnection;
use std::ops::{Deref, DerefMut};
use std::time::{Duration, Instant};

/// How long after its last use a connection is handed out without a test.
pub const FRESH: Duration = Duration::from_millis(500);

/// A pooled connection and when it was last handed back.
pub struct PooledDb {
    conn: DbConnection,
    returned: Instant,
}

impl Deref for PooledDb {
    type Target = DbConnection;
    fn deref(&self) -> &DbConnection {
        &self.conn
    }
}

impl DerefMut for PooledDb {
    fn deref_mut(&mut self) -> &mut DbConnection {
        &mut self.conn
    }
}

/// Whether a connection handed back at `returned` is tested before use at `now`.
fn needs_test(returned: Instant, now: Instant) -> bool {
    now.saturating_duration_since(returned) >= FRESH
}

/// The r2d2 manager: opens connections of the chosen backend, set up.
#[derive(Debug)]
pub struct ConnectionManager {
    target: DatabaseTarget,
}

impl ConnectionManager {
    pub fn new(target: DatabaseTarget) -> Self {
        Self { target }
    }
}

impl ManageConnection for ConnectionManager {
    type Connection = PooledDb;
    type Error = diesel::r2d2::Error;

    fn connect(&self) -> Result<PooledDb, Self::Error> {
        let conn = self
            .target
            .establish()
            .map_err(diesel::r2d2::Error::ConnectionError)?;
        Ok(PooledDb {
            conn,
            returned: Instant::now(),
        })
    }

    fn is_valid(&self, conn: &mut PooledDb) -> Result<(), Self::Error> {
        if !needs_test(conn.returned, Instant::now()) {
            return Ok(());
        }
        conn.conn
            .batch_execute("SELECT 1")
            .map_err(diesel::r2d2::Error::QueryError)
    }

    /// Called by r2d2 as a connection is handed back: when it was is kept here.
    fn has_broken(&self, conn: &mut PooledDb) -> bool {
        conn.returned = Instant::now();
        std::thread::panicking() || diesel::r2d2::R2D2Connection::is_broken(&mut conn.conn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_connections_idle_for_a_while_are_tested() {
        let returned = Instant::now();
        assert!(!needs_test(returned, returned));
        assert!(!needs_test(returned, returned + FRESH / 2));
        assert!(needs_test(returned, returned + FRESH));
        assert!(needs_test(returned, returned + 10 * FRESH));
        // A clock read before the hand-back (another thread) is not idle time.
        assert!(!needs_test(returned + FRESH, returned));
    }
}
