//! Where the coordinator stores samples: counts of `gpu_metrics` rows, read
//! directly from the database after the run.

use anyhow::Context as _;
use diesel::connection::SimpleConnection;
use diesel::sql_types::BigInt;
use diesel::{Connection, PgConnection, QueryableByName, RunQueryDsl, SqliteConnection};
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub enum Store {
    Sqlite(PathBuf),
    Postgres {
        base_url: String,
        schema: String,
        url: String,
    },
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

    /// Creates `schema` on the server at `base_url`; the coordinator gets a
    /// URL whose search_path is that schema.
    pub fn new_postgres_schema(base_url: &str, schema: &str) -> anyhow::Result<Self> {
        let mut conn = PgConnection::establish(base_url)
            .with_context(|| format!("connecting to PostgreSQL at {base_url}"))?;
        conn.batch_execute(&format!("CREATE SCHEMA {schema}"))
            .context("creating the bench schema")?;
        let sep = if base_url.contains('?') { '&' } else { '?' };
        Ok(Store::Postgres {
            base_url: base_url.to_string(),
            schema: schema.to_string(),
            url: format!("{base_url}{sep}options=-csearch_path%3D{schema}"),
        })
    }

    /// The URL the coordinator uses (PostgreSQL) or the file (SQLite).
    pub fn url(&self) -> &str {
        match self {
            Store::Sqlite(path) => path.to_str().unwrap_or_default(),
            Store::Postgres { url, .. } => url,
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
            Store::Postgres { url, .. } => {
                let mut conn = PgConnection::establish(url)?;
                diesel::sql_query(&sql).get_result::<Count>(&mut conn)?
            }
        };
        Ok(count.n.max(0) as u64)
    }

    /// Drops the PostgreSQL schema (SQLite files go with the temp dir).
    pub fn drop_schema(&self) {
        if let Store::Postgres {
            base_url, schema, ..
        } = self
        {
            if let Ok(mut conn) = PgConnection::establish(base_url) {
                let _ = conn.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
            }
        }
    }
}
