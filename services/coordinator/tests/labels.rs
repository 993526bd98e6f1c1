//! Training labels on the real server: set at create, returned by
//! GetTraining, filtered on by ListTrainings (every label must match), bad
//! ones refused with the field named and nothing written. SQLite and PostgreSQL.

mod common;

use cohort_coordinator::context::Context;
use cohort_proto::error::bad_fields;
use cohort_proto::v1;
use cohort_proto::v1::training_service_client::TrainingServiceClient;
use std::collections::HashMap;
use tonic::transport::Channel;
use tonic::Code;

fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn create(
    client: &mut TrainingServiceClient<Channel>,
    pairs: &[(&str, &str)],
) -> Result<v1::Training, tonic::Status> {
    let text = "[model]\nd_in = 8\n[optim]\nbatch_size = 4\nsteps = 5\n[data.synthetic]\nnum_samples = 64\n";
    let config = cohort_spec::TrainingConfig::from_toml(text).unwrap();
    client
        .create_training(v1::CreateTrainingRequest {
            config: Some((&config).into()),
            labels: labels(pairs),
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner())
}

async fn ids(client: &mut TrainingServiceClient<Channel>, pairs: &[(&str, &str)]) -> Vec<String> {
    let mut ids: Vec<String> = client
        .list_trainings(v1::ListTrainingsRequest {
            labels: labels(pairs),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .trainings
        .into_iter()
        .map(|t| t.id)
        .collect();
    ids.sort();
    ids
}

async fn labelled(db: common::TestDb) {
    let name = db.name;
    let server = common::server::TestServer::start(Context::new(db.db.clone())).await;
    let mut client = TrainingServiceClient::new(server.channel.clone());
    let a = create(&mut client, &[("sweep", "k-lr"), ("model.k", "16")])
        .await
        .unwrap();
    let b = create(&mut client, &[("sweep", "k-lr"), ("model.k", "32")])
        .await
        .unwrap();
    let c = create(&mut client, &[]).await.unwrap();
    assert_eq!(
        a.labels,
        labels(&[("sweep", "k-lr"), ("model.k", "16")]),
        "{name}"
    );
    let got = client
        .get_training(v1::GetTrainingRequest { id: b.id.clone() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        got.labels.get("model.k").map(String::as_str),
        Some("32"),
        "{name}"
    );
    assert!(c.labels.is_empty(), "{name}");

    let mut sweep = vec![a.id.clone(), b.id.clone()];
    sweep.sort();
    assert_eq!(
        ids(&mut client, &[("sweep", "k-lr")]).await,
        sweep,
        "{name}"
    );
    assert_eq!(
        ids(&mut client, &[("sweep", "k-lr"), ("model.k", "32")]).await,
        vec![b.id.clone()],
        "{name}"
    );
    assert!(
        ids(&mut client, &[("sweep", "other")]).await.is_empty(),
        "{name}"
    );
    assert_eq!(ids(&mut client, &[]).await.len(), 3, "{name}");

    // A bad label: the field is named and nothing is created.
    let refused = create(&mut client, &[("Model K", "16")]).await.unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument, "{name}");
    let fields = bad_fields(&refused);
    assert_eq!(fields, vec!["labels[Model K]".to_string()], "{name}");
    let too_many: Vec<(String, String)> = (0..17)
        .map(|i| (format!("k{i}"), "v".to_string()))
        .collect();
    let too_many: Vec<(&str, &str)> = too_many
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        create(&mut client, &too_many).await.unwrap_err().code(),
        Code::InvalidArgument,
        "{name}"
    );
    assert_eq!(
        ids(&mut client, &[]).await.len(),
        3,
        "{name}: nothing written"
    );
    let bad_filter = client
        .list_trainings(v1::ListTrainingsRequest {
            labels: labels(&[("k", "a b")]),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad_filter.code(), Code::InvalidArgument, "{name}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_are_kept_and_filtered_on_sqlite() {
    labelled(common::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_are_kept_and_filtered_on_postgres() {
    labelled(common::postgres().await).await;
}
