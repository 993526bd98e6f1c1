//! Real test databases: a SQLite file in a temp dir, and a private schema on
//! the PostgreSQL server at `COHORT_TEST_POSTGRES_URL` (default
//! postgres://postgres@127.0.0.1:5432/test), dropped when the test ends.

#![allow(dead_code)] // each test binary uses its own part

pub mod server;

use cohort_coordinator::model::{GpuRequest, GpuSelection};
use cohort_coordinator::persistence::{DatabaseTarget, NewTraining, Persistence};
use cohort_spec::TrainingConfig;
use cohort_testkit::PgSchema;

pub struct TestDb {
    pub name: &'static str,
    pub target: DatabaseTarget,
    pub db: Persistence,
    _cleanup: Cleanup,
}

/// What goes when the test ends: the SQLite file's directory, or the
/// PostgreSQL schema (kept when the test failed).
pub enum Cleanup {
    Sqlite(#[allow(dead_code)] tempfile::TempDir),
    Postgres(#[allow(dead_code)] PgSchema),
}

pub async fn sqlite() -> TestDb {
    let dir = tempfile::tempdir().expect("temp dir");
    let target = DatabaseTarget::Sqlite(dir.path().join("cohort.db"));
    let db = Persistence::open(target.clone())
        .await
        .expect("open sqlite");
    TestDb {
        name: "sqlite",
        target,
        db,
        _cleanup: Cleanup::Sqlite(dir),
    }
}

/// A fresh, empty schema on the real PostgreSQL server, not yet migrated,
/// dropped when the guard goes. Fails loudly when the server is down: these
/// tests are meant to run against it.
pub fn postgres_schema() -> (DatabaseTarget, Cleanup) {
    let schema = PgSchema::create().unwrap_or_else(|e| panic!("{e}"));
    (
        DatabaseTarget::Postgres(schema.url().to_string()),
        Cleanup::Postgres(schema),
    )
}

/// A migrated private schema on the real PostgreSQL server.
pub async fn postgres() -> TestDb {
    let (target, cleanup) = postgres_schema();
    let db = Persistence::open(target.clone())
        .await
        .expect("open postgres");
    TestDb {
        name: "postgres",
        target,
        db,
        _cleanup: cleanup,
    }
}

const CONFIG: &str = r#"
[model]
d_in = 16
[optim]
batch_size = 8
steps = 20
[data.synthetic]
num_samples = 256
"#;

/// A small 2-GPU training to create, queued when the GPUs are busy.
pub fn new_training(request_id: Option<&str>) -> NewTraining {
    NewTraining {
        request_id: request_id.map(str::to_string),
        display_name: "demo".into(),
        config: TrainingConfig::from_toml(CONFIG)
            .expect("the test config")
            .into(),
        gpu_request: GpuRequest {
            selection: GpuSelection::Count { count: 2 },
            queue: true,
        },
        priority: 0,
        priority_class: String::new(),
        borrow: true,
        max_restarts: 3,
        trace_context: None,
        team: String::new(),
        creator: "anonymous".into(),
        labels: Default::default(),
        audit: None,
        max_queued: None,
    }
}

/// How many trainings the database holds.
pub async fn training_count(db: &TestDb) -> i64 {
    db.db
        .count_trainings_by_state()
        .await
        .expect("counting trainings")
        .iter()
        .map(|(_, n)| n)
        .sum()
}

/// Both backends, each fresh.
pub async fn databases() -> Vec<TestDb> {
    vec![sqlite().await, postgres().await]
}

/// Every stored raw sample of a GPU in time order (a test's look inside the
/// table; the coordinator itself reads samples only in buckets).
pub async fn raw_gpu_metrics(
    db: &Persistence,
    gpu_uuid: &str,
) -> Vec<cohort_coordinator::persistence::gpu_metrics::NewGpuMetric> {
    use cohort_coordinator::persistence::gpu_metrics::NewGpuMetric;
    use cohort_coordinator::persistence::schema::gpu_metrics::dsl as m;
    use diesel::prelude::*;
    let uuid = gpu_uuid.to_string();
    db.read("test_raw_gpu_metrics", move |c| {
        Ok(m::gpu_metrics
            .filter(m::gpu_uuid.eq(&uuid))
            .order((m::sample_ms.asc(), m::id.asc()))
            .select(NewGpuMetric::as_select())
            .load(c)?)
    })
    .await
    .expect("read raw samples")
}

/// Every rollup row of a GPU in time order.
pub async fn gpu_metric_rollups(
    db: &Persistence,
    gpu_uuid: &str,
) -> Vec<cohort_coordinator::persistence::gpu_metrics::RollupRow> {
    use cohort_coordinator::persistence::gpu_metrics::RollupRow;
    use cohort_coordinator::persistence::schema::gpu_metrics_rollup as r;
    use diesel::prelude::*;
    let uuid = gpu_uuid.to_string();
    db.read("test_gpu_metric_rollups", move |c| {
        Ok(r::table
            .filter(r::gpu_uuid.eq(&uuid))
            .order((r::bucket_ms.asc(), r::training_id.asc()))
            .select(RollupRow::as_select())
            .load(c)?)
    })
    .await
    .expect("read rollups")
}
