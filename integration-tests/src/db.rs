//! The test database: a SQLite file under the coordinator's data dir, or a
//! private schema on the PostgreSQL server at `COHORT_TEST_POSTGRES_URL`
//! (default `postgres://postgres@127.0.0.1:5432/test`), dropped at the end
//! (kept when the test failed).
//! Plus direct reads of what the coordinator stored.

use cohort_testkit::PgSchema;
use diesel::connection::SimpleConnection;
use diesel::sql_types::{BigInt, Integer, Nullable, Text};
use diesel::{Connection, PgConnection, QueryableByName, RunQueryDsl, SqliteConnection};
use std::fmt;
use std::path::{Path, PathBuf};

/// The coordinator's SQLite file under `--data-dir` (services/coordinator/src/main.rs).
pub const SQLITE_FILE: &str = "coordinator.db";

/// Which database the coordinator runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        })
    }
}

/// A fresh database for one test.
#[derive(Debug)]
pub struct TestDatabase {
    pub backend: Backend,
    sqlite_path: PathBuf,
    postgres: Option<PgSchema>,
}

/// One row of `state_transitions`.
#[derive(Debug, Clone, QueryableByName)]
pub struct Transition {
    #[diesel(sql_type = Nullable<Text>)]
    pub from_state: Option<String>,
    #[diesel(sql_type = Text)]
    pub to_state: String,
    #[diesel(sql_type = Text)]
    pub reason: String,
}

/// One row of `ranks`.
#[derive(Debug, Clone, QueryableByName)]
pub struct RankRow {
    #[diesel(sql_type = Integer)]
    pub attempt: i32,
    #[diesel(sql_type = Integer)]
    pub rank: i32,
    #[diesel(sql_type = Text)]
    pub agent_id: String,
    #[diesel(sql_type = Text)]
    pub gpu_uuid: String,
    #[diesel(sql_type = Text)]
    pub state: String,
}

#[derive(Debug, QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[derive(Debug, QueryableByName)]
struct Step {
    #[diesel(sql_type = BigInt)]
    step: i64,
}

/// Runs the same diesel code on whichever backend the database is.
macro_rules! with_conn {
    ($db:expr, |$conn:ident| $body:expr) => {
        match &$db.postgres {
            Some(pg) => {
                let mut $conn = PgConnection::establish(pg.url())
                    .unwrap_or_else(|e| panic!("connecting to the test schema: {e}"));
                $body
            }
            None => {
                let path = $db.sqlite_path.to_str().expect("UTF-8 path");
                let mut $conn = SqliteConnection::establish(path)
                    .unwrap_or_else(|e| panic!("opening {path}: {e}"));
                $conn
                    .batch_execute("PRAGMA busy_timeout = 5000;")
                    .expect("busy_timeout");
                $body
            }
        }
    };
}

/// The `host:port` of the PostgreSQL server the tests use.
pub fn postgres_server() -> String {
    let url = cohort_testkit::pg::base_url();
    let rest = url.split_once('@').map_or(url.as_str(), |(_, r)| r);
    let rest = rest.split_once("://").map_or(rest, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest).to_string()
}

/// `url` with the `host:port` after its `@` replaced by `authority`.
fn with_authority(url: &str, authority: &str) -> String {
    let Some(at) = url.find('@') else {
        return url.to_string();
    };
    let rest = &url[at + 1..];
    let end = rest.find('/').unwrap_or(rest.len());
    format!("{}{authority}{}", &url[..=at], &rest[end..])
}

/// Training ids are server-made uuids; anything else would be a test bug.
fn quoted_id(id: &str) -> String {
    assert!(
        !id.is_empty()
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
        "unexpected training id {id:?}"
    );
    format!("'{id}'")
}

impl TestDatabase {
    /// A fresh database: for SQLite the coordinator creates the file under
    /// `data_dir`; for PostgreSQL a new schema `t_<uuid>` is created now.
    pub fn create(backend: Backend, data_dir: &Path) -> TestDatabase {
        let postgres = match backend {
            Backend::Sqlite => None,
            Backend::Postgres => Some(PgSchema::create().unwrap_or_else(|e| panic!("{e}"))),
        };
        TestDatabase {
            backend,
            sqlite_path: data_dir.join(SQLITE_FILE),
            postgres,
        }
    }

    /// The coordinator flags selecting this database (besides `--data-dir`).
    pub fn coordinator_args(&self) -> Vec<String> {
        self.coordinator_args_via(None)
    }

    /// [`TestDatabase::coordinator_args`], with PostgreSQL reached at
    /// `authority` (`host:port`, e.g. a [`crate::proxy::Proxy`]) when given.
    pub fn coordinator_args_via(&self, authority: Option<&str>) -> Vec<String> {
        match &self.postgres {
            Some(pg) => {
                let url = match authority {
                    Some(a) => with_authority(pg.url(), a),
                    None => pg.url().to_string(),
                };
                vec!["--database-url".into(), url]
            }
            None => Vec::new(),
        }
    }

    /// The state transitions of a training, oldest first.
    pub fn transitions(&self, training_id: &str) -> Vec<Transition> {
        let sql = format!(
            "SELECT from_state, to_state, reason FROM state_transitions \
             WHERE training_id = {} ORDER BY id",
            quoted_id(training_id)
        );
        with_conn!(self, |conn| diesel::sql_query(&sql)
            .load::<Transition>(&mut conn)
            .expect("reading state_transitions"))
    }

    /// The rank map of a training, every attempt, by attempt and rank.
    pub fn ranks(&self, training_id: &str) -> Vec<RankRow> {
        let sql = format!(
            "SELECT attempt, rank, agent_id, gpu_uuid, state FROM ranks \
             WHERE training_id = {} ORDER BY attempt, rank",
            quoted_id(training_id)
        );
        with_conn!(self, |conn| diesel::sql_query(&sql)
            .load::<RankRow>(&mut conn)
            .expect("reading ranks"))
    }

    /// The steps of a training's stored checkpoints, ascending.
    pub fn checkpoint_steps(&self, training_id: &str) -> Vec<i64> {
        let sql = format!(
            "SELECT step FROM checkpoints WHERE training_id = {} ORDER BY step",
            quoted_id(training_id)
        );
        with_conn!(self, |conn| diesel::sql_query(&sql)
            .load::<Step>(&mut conn)
            .expect("reading checkpoints")
            .into_iter()
            .map(|s| s.step)
            .collect())
    }

    /// How many trainings are stored.
    pub fn training_count(&self) -> i64 {
        let sql = "SELECT COUNT(*) AS n FROM trainings";
        with_conn!(self, |conn| diesel::sql_query(sql)
            .get_result::<Count>(&mut conn)
            .expect("counting trainings")
            .n)
    }
}
