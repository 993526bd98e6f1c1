//! Quotas that lend, between two teams with tokens: vision borrows nlp's
//! idle guarantee (marked borrowing; ListQuotas says who borrows and who
//! lends), nlp reclaims it with a notice (vision's training goes back to
//! the queue, no restart spent, and runs again once the GPUs are free), and
//! a training that may not borrow waits within its team's guarantee.

use cohort_integration_tests::cluster::AgentSpec;
use cohort_integration_tests::job::create_request;
use cohort_integration_tests::secure::authed;
use cohort_integration_tests::{Cluster, SaeJob};
use cohort_proto::error::Reason;
use cohort_proto::v1;
use cohort_proto::v1::admin_service_client::AdminServiceClient;
use cohort_proto::v1::training::State;
use cohort_proto::v1::training_service_client::TrainingServiceClient;
use cohort_testkit::{eventually, holds};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(120);

struct Teams {
    c: Cluster,
    root: String,
    vision: String,
    nlp: String,
}

impl Teams {
    async fn create(&self, token: &str, request: v1::CreateTrainingRequest) -> v1::Training {
        TrainingServiceClient::new(self.c.channel().await)
            .create_training(authed(request, token))
            .await
            .expect("create")
            .into_inner()
    }

    async fn get(&self, token: &str, id: &str) -> v1::Training {
        TrainingServiceClient::new(self.c.channel().await)
            .get_training(authed(v1::GetTrainingRequest { id: id.into() }, token))
            .await
            .expect("get")
            .into_inner()
    }

    async fn wait(&self, token: &str, id: &str, state: State) -> v1::Training {
        eventually(&format!("{id} {state:?}"), WAIT, || async {
            let t = self.get(token, id).await;
            if t.state() == state {
                Ok(t)
            } else {
                Err(format!("{:?}: {}", t.state(), t.state_reason))
            }
        })
        .await
    }

    async fn quotas(&self) -> Vec<v1::TeamQuota> {
        AdminServiceClient::new(self.c.channel().await)
            .list_quotas(authed(v1::ListQuotasRequest {}, &self.root))
            .await
            .expect("ListQuotas")
            .into_inner()
            .quotas
    }

    async fn cancel(&self, token: &str, id: &str) {
        TrainingServiceClient::new(self.c.channel().await)
            .cancel_training(authed(
                v1::CancelTrainingRequest {
                    id: id.into(),
                    reason: "test over".into(),
                },
                token,
            ))
            .await
            .expect("cancel");
    }
}

fn quota<'a>(quotas: &'a [v1::TeamQuota], team: &str) -> &'a v1::TeamQuota {
    quotas
        .iter()
        .find(|q| q.team == team)
        .expect("the team's quota")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_borrows_idle_quota_and_the_lender_reclaims_it() {
    let (mut c, [root, vision, nlp]) = Cluster::with_team_tokens(vec![]).await;
    c.start_agent_as(AgentSpec::new("agent-0", 2, &[]));
    let teams = Teams {
        c,
        root,
        vision,
        nlp,
    };
    teams
        .c
        .cli_ok_as(
            Some(&teams.root),
            &[
                "admin",
                "quota",
                "set",
                "vision",
                "--gpus",
                "1",
                "--borrow-limit",
                "1",
                "--weight",
                "2",
            ],
        )
        .await;
    teams
        .c
        .cli_ok_as(
            Some(&teams.root),
            &["admin", "quota", "set", "nlp", "--gpus", "1"],
        )
        .await;
    eventually("the agent's GPUs", WAIT, || async {
        let gpus =
            cohort_proto::v1::gpu_service_client::GpuServiceClient::new(teams.c.channel().await)
                .list_gpus(authed(v1::ListGpusRequest::default(), &teams.root))
                .await
                .map_err(|s| format!("{s:?}"))?
                .into_inner()
                .gpus;
        let live = gpus
            .iter()
            .filter(|g| g.availability() != v1::GpuAvailability::Offline)
            .count();
        (live == 2).then_some(()).ok_or(format!("{live} GPUs"))
    })
    .await;

    // vision runs on 2 GPUs: its guarantee and nlp's idle one.
    let long = SaeJob::with_steps(1_000_000);
    let borrower = teams
        .create(&teams.vision, create_request(&long, 2, true))
        .await;
    let t = teams
        .wait(&teams.vision, &borrower.id, State::Running)
        .await;
    assert!(t.borrow);
    let t = eventually("marked borrowing", WAIT, || async {
        let t = teams.get(&teams.vision, &borrower.id).await;
        t.borrowing.then_some(t.clone()).ok_or(format!("{t:?}"))
    })
    .await;
    assert_eq!(t.preemption_count, 0);
    let quotas = teams.quotas().await;
    let (v, n) = (quota(&quotas, "vision"), quota(&quotas, "nlp"));
    assert_eq!(
        (v.gpus, v.borrow_limit, v.weight),
        (Some(1), Some(1), Some(2.0))
    );
    assert_eq!((v.gpus_in_use, v.gpus_borrowed, v.gpus_lent), (2, 1, 0));
    assert_eq!((n.gpus_in_use, n.gpus_borrowed, n.gpus_lent), (0, 0, 1));
    let table = teams
        .c
        .cli_ok_as(Some(&teams.root), &["admin", "quota", "list"])
        .await;
    assert!(
        table.contains("BORROWED") && table.contains("LENT"),
        "{table}"
    );

    // nlp wants its guarantee back: vision's training gets its notice,
    // checkpoints, and goes back to the queue; nlp's runs.
    let mine = teams
        .create(
            &teams.nlp,
            create_request(&SaeJob::with_steps(1_000_000), 1, true),
        )
        .await;
    teams.wait(&teams.nlp, &mine.id, State::Running).await;
    let back = teams.wait(&teams.vision, &borrower.id, State::Queued).await;
    assert!(
        back.state_reason.starts_with(&format!(
            "PREEMPTED: reclaimed for team nlp (training {})",
            mine.id
        )),
        "{}",
        back.state_reason
    );
    assert_eq!((back.preemption_count, back.restart_count), (1, 0));
    assert!(!back.borrowing);
    // While nlp holds its GPU, vision fits only its guarantee: it waits.
    holds(
        "vision's borrower waits",
        Duration::from_secs(3),
        || async {
            let state = teams.get(&teams.vision, &borrower.id).await.state();
            (state == State::Queued)
                .then_some(())
                .ok_or(format!("{state:?}"))
        },
    )
    .await;

    // A training that may not borrow waits within its guarantee.
    let mut within = create_request(&SaeJob::small(), 2, true);
    within.borrow = Some(false);
    let within = teams.create(&teams.vision, within).await;
    let held = eventually("held back by the guarantee", WAIT, || async {
        let t = teams.get(&teams.vision, &within.id).await;
        t.state_reason
            .starts_with(Reason::QuotaExceeded.as_str())
            .then_some(t.clone())
            .ok_or(t.state_reason.clone())
    })
    .await;
    assert!(!held.borrow);
    teams.cancel(&teams.vision, &within.id).await;

    // nlp done: vision borrows again and resumes from its checkpoint.
    teams.cancel(&teams.nlp, &mine.id).await;
    let again = teams
        .wait(&teams.vision, &borrower.id, State::Running)
        .await;
    assert_eq!((again.attempt, again.restart_count), (2, 0));
    teams.cancel(&teams.vision, &borrower.id).await;
}
