//! Connections to either backend. The backend is chosen from the URL scheme
//! here, never by `MultiConnection::establish` (which tries each backend in
//! turn and hides the real error).

use super::DatabaseError;
use diesel::connection::SimpleConnection;
use diesel::pg::PgConnection;
use diesel::sqlite::SqliteConnection;
use diesel::{Connection, RunQueryDsl};
use diesel_migrations::{embed_migrations, EmbeddedMigrations, MigrationHarness};
use std::path::PathBuf;
use std::time::Duration;

const SQLITE_MIGRATIONS: EmbeddedMigrations = embed_migrations!("../../migrations/sqlite");
const POSTGRES_MIGRATIONS: EmbeddedMigrations = embed_migrations!("../../migrations/postgres");

/// How long a SQLite connection waits for another writer before "database is locked".
pub const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How much of an SQLite file its connections read through a memory map
/// instead of copying each page with a read call (a scheduling pass reads
/// every waiting training's row).
const SQLITE_MMAP_BYTES: u64 = 1 << 30;

/// A connection to either backend; every query is written once against it.
#[derive(diesel::MultiConnection)]
pub enum DbConnection {
    Pg(PgConnection),
    Sqlite(SqliteConnection),
}

/// Runs `$body` with `$c` bound to the backend's own connection: for
/// statements the multi-backend connection cannot build, such as multi-row
/// inserts (each backend type-checks `$body` on its own).
macro_rules! on_backend {
    ($conn:expr, |$c:ident| $body:expr) => {
        match $conn {
            $crate::persistence::DbConnection::Pg($c) => $body,
            $crate::persistence::DbConnection::Sqlite($c) => $body,
        }
    };
}
pub(crate) use on_backend;

/// Which database to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseTarget {
    /// A PostgreSQL connection URL (`postgres://` or `postgresql://`).
    Postgres(String),
    /// A SQLite database file.
    Sqlite(PathBuf),
}

impl DatabaseTarget {
    /// `postgres://...` and `postgresql://...` are PostgreSQL; anything else is
    /// a SQLite file path (an optional `sqlite://` prefix is removed).
    pub fn from_url(url: &str) -> Self {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            DatabaseTarget::Postgres(url.to_string())
        } else {
            let path = url.strip_prefix("sqlite://").unwrap_or(url);
            DatabaseTarget::Sqlite(PathBuf::from(path))
        }
    }

    /// "postgresql" or "sqlite".
    pub fn backend_name(&self) -> &'static str {
        match self {
            DatabaseTarget::Postgres(_) => "postgresql",
            DatabaseTarget::Sqlite(_) => "sqlite",
        }
    }

    /// For logs: the URL without its password, or the file path.
    pub fn redacted(&self) -> String {
        match self {
            DatabaseTarget::Sqlite(path) => path.display().to_string(),
            DatabaseTarget::Postgres(url) => redact_password(url),
        }
    }

    pub(super) fn establish(&self) -> Result<DbConnection, diesel::ConnectionError> {
        match self {
            DatabaseTarget::Postgres(url) => {
                let mut conn = PgConnection::establish(url)?;
                // A coordinator frozen in the middle of a transaction (SIGSTOP,
                // a hung host) would hold its locks — the lease row's FOR KEY SHARE
                // among them — until its TCP connection dies, hours later, and
                // no standby could take the lease. PostgreSQL ends such a
                // session after this long idle inside a transaction.
                //
                // Every statement is planned with its parameters: diesel
                // prepares each statement once per connection, and after
                // five runs PostgreSQL may keep a generic plan made while
                // the tables were small — a sequential scan of `trainings`
                // for a look-up by request id, still used at 20,000 rows
                // until autovacuum's next analyze (see docs/benchmarks.md).
                conn.batch_execute(&format!(
                    "SET idle_in_transaction_session_timeout = {}; \
                     SET plan_cache_mode = force_custom_plan",
                    PG_IDLE_IN_TRANSACTION.as_millis()
                ))
                .map_err(diesel::ConnectionError::CouldntSetupConfiguration)?;
                Ok(DbConnection::Pg(conn))
            }
            DatabaseTarget::Sqlite(path) => {
                let path = path.to_str().ok_or_else(|| {
                    diesel::ConnectionError::BadConnection(format!(
                        "database path is not UTF-8: {}",
                        path.display()
                    ))
                })?;
                let mut conn = SqliteConnection::establish(path)?;
                // busy_timeout first: switching a fresh file to WAL takes a
                // lock that concurrently opening connections must wait for.
                let pragmas = format!(
                    "PRAGMA busy_timeout = {}; PRAGMA journal_mode = WAL; \
                     PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; \
                     PRAGMA mmap_size = {};",
                    SQLITE_BUSY_TIMEOUT.as_millis(),
                    SQLITE_MMAP_BYTES
                );
                conn.batch_execute(&pragmas)
                    .map_err(diesel::ConnectionError::CouldntSetupConfiguration)?;
                Ok(DbConnection::Sqlite(conn))
            }
        }
    }
}

fn redact_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((userinfo, host)) = rest.split_once('@') else {
        return url.to_string();
    };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

/// How long a PostgreSQL session may sit idle inside a transaction before
/// the server ends it (and its locks go): under the 5 s lease, so a frozen
/// leader never holds the lease row past its lease.
pub const PG_IDLE_IN_TRANSACTION: std::time::Duration = std::time::Duration::from_secs(3);

/// Key of the PostgreSQL advisory lock that serialises migrations.
const MIGRATION_LOCK_KEY: i64 = 0x636f_686f_7274; // "cohort"

/// Applies the pending migrations of the connection's backend; returns how
/// many ran. Coordinators opening one database at once take turns: the whole
/// run holds the SQLite write lock or a PostgreSQL advisory lock, so the
/// second finds nothing left to apply.
pub fn run_migrations(conn: &mut DbConnection) -> Result<usize, DatabaseError> {
    fn migrate<C>(c: &mut C, source: EmbeddedMigrations) -> Result<usize, DatabaseError>
    where
        C: MigrationHarness<C::Backend> + Connection,
    {
        c.run_pending_migrations(source)
            .map(|applied| applied.len())
            .map_err(|e| DatabaseError::Migration(e.to_string()))
    }
    match conn {
        DbConnection::Pg(c) => c.transaction(|c| {
            diesel::sql_query(format!(
                "SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})"
            ))
            .execute(c)?;
            migrate(c, POSTGRES_MIGRATIONS)
        }),
        DbConnection::Sqlite(c) => c.immediate_transaction(|c| migrate(c, SQLITE_MIGRATIONS)),
    }
}

/// Runs `f` in a transaction that may write: on SQLite `BEGIN IMMEDIATE`
/// (the write lock up front, waiting `busy_timeout` for it, so the
/// transaction never has to upgrade a read lock, which WAL refuses with
/// SQLITE_BUSY without waiting); on PostgreSQL a plain `BEGIN`. Committed
/// when `f` succeeds, rolled back when it fails — as `Connection::transaction`.
pub fn write_transaction<T, F>(conn: &mut DbConnection, f: F) -> Result<T, DatabaseError>
where
    F: FnOnce(&mut DbConnection) -> Result<T, DatabaseError>,
{
    use diesel::connection::{AnsiTransactionManager, TransactionManager};
    type Manager = <DbConnection as Connection>::TransactionManager;
    match conn {
        // Same transaction state as `Manager`, which delegates to the
        // SQLite connection's AnsiTransactionManager.
        DbConnection::Sqlite(c) => {
            AnsiTransactionManager::begin_transaction_sql(c, "BEGIN IMMEDIATE")?
        }
        DbConnection::Pg(_) => Manager::begin_transaction(conn)?,
    }
    match f(conn) {
        Ok(value) => {
            Manager::commit_transaction(conn)?;
            Ok(value)
        }
        Err(error) => match Manager::rollback_transaction(conn) {
            Ok(()) | Err(diesel::result::Error::BrokenTransactionManager) => Err(error),
            Err(rollback) => Err(rollback.into()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_follows_the_scheme() {
        assert_eq!(
            DatabaseTarget::from_url("postgres://u@h/db").backend_name(),
            "postgresql"
        );
        assert_eq!(
            DatabaseTarget::from_url("postgresql://u@h/db").backend_name(),
            "postgresql"
        );
        assert_eq!(
            DatabaseTarget::from_url("sqlite:///tmp/x.db"),
            DatabaseTarget::Sqlite("/tmp/x.db".into())
        );
        assert_eq!(
            DatabaseTarget::from_url("data/cohort.db"),
            DatabaseTarget::Sqlite("data/cohort.db".into())
        );
        assert_eq!(
            DatabaseTarget::from_url("postgres://u:secret@h/db").redacted(),
            "postgres://u:***@h/db"
        );
    }
}
