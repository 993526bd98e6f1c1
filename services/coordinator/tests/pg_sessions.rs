//! The coordinator's PostgreSQL sessions: how each is set up, and pooled
//! connections whose sessions the server ended (a restart,
//! `pg_terminate_backend`, a failover of the database) — the pool tests a
//! connection at check-out only when it sat idle, so these tests end the
//! coordinator's sessions for real and look at what the next calls get.

mod common;

use cohort_coordinator::persistence::{
    DatabaseTarget, Persistence, PersistenceOptions, POOL_FRESH_WINDOW,
};
use common::new_training;
use diesel::{Connection, PgConnection, RunQueryDsl};
use std::time::Duration;

/// A migrated private schema whose connections carry `application_name`,
/// so that the test can end exactly this pool's sessions.
async fn open(pool_size: u32) -> (Persistence, String, common::Cleanup) {
    let (target, cleanup) = common::postgres_schema();
    let DatabaseTarget::Postgres(url) = target else {
        unreachable!("postgres_schema is PostgreSQL")
    };
    let app = format!("cohort-stale-{}", uuid::Uuid::new_v4().simple());
    let target = DatabaseTarget::Postgres(format!("{url}&application_name={app}"));
    let options = PersistenceOptions {
        max_connections: Some(pool_size),
        ..Default::default()
    };
    let db = Persistence::open_with(target, options)
        .await
        .expect("open postgres");
    (db, app, cleanup)
}

/// Ends every session of `app` on the server, as a restart would; returns how many.
fn end_sessions(app: &str) -> usize {
    #[derive(diesel::QueryableByName)]
    struct Ended {
        #[diesel(sql_type = diesel::sql_types::Bool)]
        #[allow(dead_code)]
        ended: bool,
    }
    let mut conn = PgConnection::establish(&cohort_testkit::pg::base_url()).expect("connect");
    let ended: Vec<Ended> = diesel::sql_query(
        "SELECT pg_terminate_backend(pid) AS ended FROM pg_stat_activity \
         WHERE application_name = $1",
    )
    .bind::<diesel::sql_types::Text, _>(app)
    .load(&mut conn)
    .expect("terminate");
    ended.len()
}

/// Reads `id` and creates another training, both without an error.
async fn serves(db: &Persistence, id: &str) {
    let got = db.get_training(id).await.unwrap();
    assert_eq!(got.map(|t| t.id).as_deref(), Some(id));
    let second = db
        .create_training(new_training(Some("after")))
        .await
        .unwrap();
    assert!(second.created);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_idle_past_the_window_is_tested_and_replaced() {
    let (db, app, _cleanup) = open(4).await;
    let first = db.create_training(new_training(None)).await.unwrap();
    assert!(end_sessions(&app) >= 1, "the pool had sessions to end");
    // Past the window every pooled connection is tested at check-out: the
    // dead ones are replaced and no call sees them. The passing of the
    // window itself is what is tested: there is nothing to poll for.
    tokio::time::sleep(POOL_FRESH_WINDOW + Duration::from_millis(200)).await;
    serves(&db, &first.training.id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_found_closed_is_not_handed_out_again() {
    let (db, app, _cleanup) = open(1).await;
    let first = db.create_training(new_training(None)).await.unwrap();
    assert_eq!(end_sessions(&app), 1);
    // Within the window the one connection is handed out untested: this
    // call finds it closed, as it would a restart in the middle of a call…
    let failed = db.get_training(&first.training.id).await.unwrap_err();
    assert!(failed.is_unavailable(), "{failed:?}");
    // …and the connection is dropped, not handed out again untested.
    serves(&db, &first.training.id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_plan_each_statement_and_bound_idle_transactions() {
    #[derive(diesel::QueryableByName)]
    struct Setting {
        #[diesel(sql_type = diesel::sql_types::Text)]
        value: String,
    }
    let (db, _app, _cleanup) = open(2).await;
    let show = |name: &'static str| {
        db.read("show", move |c| {
            let rows: Vec<Setting> =
                diesel::sql_query(format!("SELECT current_setting('{name}') AS value")).load(c)?;
            Ok(rows.into_iter().map(|r| r.value).collect::<Vec<_>>())
        })
    };
    assert_eq!(
        show("plan_cache_mode").await.unwrap(),
        ["force_custom_plan"]
    );
    assert_eq!(
        show("idle_in_transaction_session_timeout").await.unwrap(),
        ["3s"]
    );
}
