//! WatchTraining's `max_points` on the real server: a long stored history
//! comes thinned (at most N progress points, first and last included, every
//! other event kept), live events come whole. SQLite and PostgreSQL.

mod common;

use cohort_coordinator::context::Context;
use cohort_coordinator::model::EventPayload;
use cohort_proto::v1;
use cohort_proto::v1::training_event::Event;
use cohort_proto::v1::training_service_client::TrainingServiceClient;
use cohort_spec::progress::ProgressLine;
use tokio_stream::StreamExt;
use tonic::Code;

const STEPS: i64 = 5_000;

fn line(text: String) -> EventPayload {
    EventPayload::Rank(ProgressLine::parse(&text).expect("a progress line"))
}

fn progress(step: i64) -> EventPayload {
    line(format!(
        r#"{{"event":"progress","step":{step},"total_steps":{STEPS},"epoch":0,"loss":{},"mse":0.1,"l1":0.0,"samples_per_sec":1000.0,"step_time_ms":1.0}}"#,
        1.0 / step as f64
    ))
}

fn validation(step: i64) -> EventPayload {
    line(format!(
        r#"{{"event":"validation","step":{step},"loss":0.5,"mse":0.5,"l0":8.0,"explained_variance":0.8,"dead_fraction":0.0,"samples":64,"best":false}}"#
    ))
}

async fn thinned(db: common::TestDb) {
    let name = db.name;
    let ctx = Context::new(db.db.clone());
    let server = common::server::TestServer::start(ctx).await;
    let mut client = TrainingServiceClient::new(server.channel.clone());
    let text = "[model]\nd_in = 8\n[optim]\nbatch_size = 4\nsteps = 5\n[data.synthetic]\nnum_samples = 64\n";
    let config = cohort_spec::TrainingConfig::from_toml(text).unwrap();
    let training = client
        .create_training(v1::CreateTrainingRequest {
            config: Some((&config).into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    for step in 1..=STEPS {
        db.db
            .append_event(&training.id, 1, progress(step))
            .await
            .unwrap();
        if step % 1_000 == 0 {
            db.db
                .append_event(&training.id, 1, validation(step))
                .await
                .unwrap();
        }
    }

    let mut stream = client
        .watch_training(v1::WatchTrainingRequest {
            id: training.id.clone(),
            max_points: 100,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let (mut steps, mut validations) = (Vec::new(), 0);
    // The stored history: the creation, 5,000 progress points and 5 validations.
    while validations < 5 || steps.last() != Some(&STEPS) {
        match stream.next().await.unwrap().unwrap().event.unwrap() {
            Event::Progress(p) => steps.push(p.step),
            Event::Validation(_) => validations += 1,
            _ => {}
        }
    }
    assert!(
        steps.len() <= 100 && steps.len() >= 50,
        "{name}: {} points",
        steps.len()
    );
    assert_eq!(steps[0], 1, "{name}");
    assert!(steps.windows(2).all(|w| w[0] < w[1]), "{name}: in order");

    // A live point after the history is sent, whatever the thinning.
    db.db
        .append_event(&training.id, 1, progress(STEPS + 1))
        .await
        .unwrap();
    let live = loop {
        if let Event::Progress(p) = stream.next().await.unwrap().unwrap().event.unwrap() {
            break p.step;
        }
    };
    assert_eq!(live, STEPS + 1, "{name}");

    let refused = client
        .watch_training(v1::WatchTrainingRequest {
            id: training.id.clone(),
            max_points: -1,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument, "{name}");
    drop(stream);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_history_is_thinned_for_charts_on_sqlite() {
    thinned(common::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_history_is_thinned_for_charts_on_postgres() {
    thinned(common::postgres().await).await;
}
