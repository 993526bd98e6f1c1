//! Where the coordinator stores samples: counts of `gpu_metrics` rows, read
//! directly from the database after the run.

use anyhow::Context as _;
use cohort_testkit::PgSchema;
use diesel::connection::SimpleConnection;
use diesel::sql_types::BigInt;
use diesel::{Connection, PgConnection, QueryableByName, RunQueryDsl, SqliteConnection};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub enum Store {
    Sqlite(PathBuf),
    /// A schema of its own, dropped when the last clone goes.
    Postgres(Arc<PgSchema>),
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

impl Store {
    pub fn sqlite(path: PathBuf) -> Self {
        Store::Sqlite(path)
    }

    /// A new schema on the server at `base_url`; the coordinator gets a
    /// URL whose search_path is that schema.
    pub fn new_postgres_schema(base_url: &str) -> anyhow::Result<Self> {
        let schema = PgSchema::create_on(base_url).map_err(anyhow::Error::msg)?;
        Ok(Store::Postgres(Arc::new(schema)))
    }

    /// The URL the coordinator uses (PostgreSQL) or the file (SQLite).
    pub fn url(&self) -> &str {
        match self {
            Store::Sqlite(path) => path.to_str().unwrap_or_default(),
            Store::Postgres(schema) => schema.url(),
        }
    }

    /// Rows of `gpu_metrics` with `from_ms <= sample_ms < to_ms`.
    pub fn stored_between(&self, from_ms: i64, to_ms: i64) -> anyhow::Result<u64> {
        let sql = format!(
            "SELECT COUNT(*) AS n FROM gpu_metrics WHERE sample_ms >= {from_ms} AND sample_ms < {to_ms}"
        );
        let count = match self {
            Store::Sqlite(path) => {
                let path = path.to_str().context("non-UTF-8 SQLite path")?;
                let mut conn = SqliteConnection::establish(path)?;
                conn.batch_execute("PRAGMA busy_timeout = 10000;")?;
                diesel::sql_query(&sql).get_result::<Count>(&mut conn)?
            }
            Store::Postgres(schema) => {
                let mut conn = PgConnection::establish(schema.url())?;
                diesel::sql_query(&sql).get_result::<Count>(&mut conn)?
            }
        };
        Ok(count.n.max(0) as u64)
    }
}
