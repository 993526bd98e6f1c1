//! A private schema per test on the real PostgreSQL server
//! (`COHORT_TEST_POSTGRES_URL`, default [`DEFAULT_URL`]): created on
//! demand, reached through a URL whose search path is the schema, dropped
//! at the end unless the test failed (then kept for a look).

use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection};

/// The server the tests use unless `COHORT_TEST_POSTGRES_URL` says otherwise.
pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The server's URL for this run.
pub fn base_url() -> String {
    std::env::var("COHORT_TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_URL.into())
}

#[derive(Debug)]
pub struct PgSchema {
    base_url: String,
    schema: String,
    url: String,
}

impl PgSchema {
    /// A new, empty schema `t_<uuid>` on the server at [`base_url`].
    pub fn create() -> Result<PgSchema, String> {
        Self::create_on(&base_url())
    }

    /// A new, empty schema on the server at `base_url`.
    pub fn create_on(base_url: &str) -> Result<PgSchema, String> {
        let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
        let mut conn = PgConnection::establish(base_url)
            .map_err(|e| format!("PostgreSQL at {base_url} is required here: {e}"))?;
        conn.batch_execute(&format!("CREATE SCHEMA {schema}"))
            .map_err(|e| format!("creating schema {schema}: {e}"))?;
        let sep = if base_url.contains('?') { '&' } else { '?' };
        Ok(PgSchema {
            url: format!("{base_url}{sep}options=-csearch_path%3D{schema}"),
            base_url: base_url.to_string(),
            schema,
        })
    }

    /// The URL whose connections work in the schema.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn name(&self) -> &str {
        &self.schema
    }

    /// The server's URL (outside the schema).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept PostgreSQL schema {} of the failed test", self.schema);
            return;
        }
        if let Ok(mut conn) = PgConnection::establish(&self.base_url) {
            let _ = conn.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema));
        }
    }
}
