//! Security end to end, with the real binaries on 127.0.0.1: TLS with
//! certificates made by openssl, agents identified by their client
//! certificates, bearer tokens with roles and teams, quotas, revocation,
//! the audit trail, certificate rotation by SIGHUP, data roots, and the
//! refusal to listen openly without authentication.

use cohort_integration_tests::bins::{binaries, grpcurl};
use cohort_integration_tests::cluster::{AgentSpec, Security, ServerTls};
use cohort_integration_tests::job::{create_request, SaeJob};
use cohort_integration_tests::secure::{authed, Pki};
use cohort_integration_tests::status::expect_error;
use cohort_integration_tests::{Backend, Cluster, ClusterOptions};
use cohort_proto::error::Reason;
use cohort_proto::v1::{self, admin_service_client::AdminServiceClient};
use cohort_proto::v1::{
    gpu_service_client::GpuServiceClient, telemetry_service_client::TelemetryServiceClient,
    training_service_client::TrainingServiceClient,
};
use cohort_testkit::{eventually, holds};
use std::time::Duration;
use tonic::Code;

const AGENT_TIMEOUT: Duration = Duration::from_secs(60);

/// An agent whose host holds an S3 secret of its own, which no rank may
/// see and no team's S3 access may use.
fn host_agent(name: &str, gpus: usize, flags: &[String]) -> AgentSpec {
    AgentSpec {
        env: vec![(
            "AWS_SECRET_ACCESS_KEY".into(),
            "the-agent-host-s-own".into(),
        )],
        ..AgentSpec::new(name, gpus, flags)
    }
}

fn temp() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("cohort-sec-")
        .tempdir()
        .expect("temp dir")
}

/// The live GPUs `token` sees.
async fn live_gpus(c: &Cluster, token: &str) -> Result<Vec<v1::Gpu>, String> {
    live_on(c.channel().await, token).await
}

/// The live GPUs `token` sees through `channel`.
async fn live_on(channel: tonic::transport::Channel, token: &str) -> Result<Vec<v1::Gpu>, String> {
    let gpus = GpuServiceClient::new(channel)
        .list_gpus(authed(v1::ListGpusRequest::default(), token))
        .await
        .map_err(|s| format!("{s:?}"))?
        .into_inner()
        .gpus;
    Ok(gpus
        .into_iter()
        .filter(|g| g.availability() != v1::GpuAvailability::Offline)
        .collect())
}

/// How many GPUs are live, asked over a channel that trusts `ca` (a
/// rotated server's).
async fn live_trusting(c: &Cluster, ca: &std::path::Path, token: &str) -> Result<usize, String> {
    let channel = c
        .channel_with(Some(ca))
        .await
        .map_err(|e| format!("{e:?}"))?;
    Ok(live_on(channel, token).await?.len())
}

fn audit_has(events: &serde_json::Value, method: &str, code: &str) -> bool {
    events["events"].as_array().is_some_and(|events| {
        events
            .iter()
            .any(|e| e["method"].as_str().is_some_and(|m| m.ends_with(method)) && e["code"] == code)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_agent_certificates_and_rotation() {
    let dir = temp();
    let pki = Pki::new(&dir.path().join("pki"), "main");
    let server = pki.server("server");
    let probe_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let mut c = Cluster::prepare(ClusterOptions {
        security: Security {
            tls: Some(ServerTls {
                pair: server.clone(),
                ca: pki.ca(),
            }),
            agent_ca: Some(pki.ca()),
            auth: Some("token".into()),
        },
        coordinator_args: vec![
            "--health-listen".into(),
            format!("127.0.0.1:{probe_port}"),
            // The main CA may certify agents named agent-* only.
            "--agent-names".into(),
            "main test CA=agent-*".into(),
        ],
        ..ClusterOptions::new(Backend::Sqlite, 0)
    });
    let admin = c.bootstrap_token("ops", "root", "cluster-admin");
    assert!(admin.len() >= 32, "a secret of some length: {admin}");
    c.launch().await;

    // Kubernetes-style probes: plaintext grpc.health.v1 on --health-listen,
    // and nothing else there.
    let probes = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{probe_port}"))
        .unwrap()
        .connect()
        .await
        .expect("the health listener");
    let health = tonic_health::pb::health_client::HealthClient::new(probes.clone())
        .check(tonic_health::pb::HealthCheckRequest {
            service: "cohort.v1.TrainingService".into(),
        })
        .await
        .expect("health over plaintext")
        .into_inner();
    assert_eq!(
        health.status(),
        tonic_health::pb::health_check_response::ServingStatus::Serving
    );
    let other = GpuServiceClient::new(probes)
        .list_gpus(authed(v1::ListGpusRequest::default(), &admin))
        .await;
    assert_eq!(
        other.unwrap_err().code(),
        Code::Unimplemented,
        "only health on the probe port"
    );

    // Plaintext to the TLS port gets nowhere.
    let plain = tonic::transport::Endpoint::from_shared(c.plain_url())
        .unwrap()
        .connect_timeout(Duration::from_secs(3))
        .connect()
        .await;
    let refused = match plain {
        Err(_) => true,
        Ok(channel) => GpuServiceClient::new(channel)
            .list_gpus(authed(v1::ListGpusRequest::default(), &admin))
            .await
            .is_err(),
    };
    assert!(
        refused,
        "a plaintext call succeeded against the TLS listener"
    );

    // The CLI over TLS with the token; without it, UNAUTHENTICATED (exit 9).
    let me = c.cli_ok_as(Some(&admin), &["-o", "json", "whoami"]).await;
    let me: serde_json::Value = serde_json::from_str(&me).unwrap();
    assert_eq!(me["team"], "ops");
    assert_eq!(me["role"], "ROLE_CLUSTER_ADMIN");
    let anonymous = c.cli_as(None, &["-o", "json", "gpus"]).await;
    assert_eq!(anonymous.status.code(), Some(9), "{anonymous:?}");
    let err: serde_json::Value = serde_json::from_slice(&anonymous.stderr).unwrap();
    assert_eq!(
        err["error"]["reason"],
        Reason::Unauthenticated.as_str(),
        "{err}"
    );

    // An agent with its certificate registers under its name.
    let good = pki.agent("agent-0", "agent-0");
    let tls_flags = |pair: &cohort_integration_tests::secure::CertPair, ca: &std::path::Path| {
        vec![
            "--tls-ca".to_string(),
            ca.display().to_string(),
            "--tls-cert".to_string(),
            pair.cert.display().to_string(),
            "--tls-key".to_string(),
            pair.key.display().to_string(),
        ]
    };
    // agent-0 trusts its own copy of the CA, replaced at the rotation below.
    let agent_trust = dir.path().join("agent-0-trust.pem");
    std::fs::copy(pki.ca(), &agent_trust).unwrap();
    c.start_agent_as(host_agent("agent-0", 1, &tls_flags(&good, &agent_trust)));
    eventually("agent-0's GPU", AGENT_TIMEOUT, || async {
        let gpus = live_gpus(&c, &admin).await?;
        (gpus.len() == 1)
            .then_some(())
            .ok_or(format!("{} GPUs", gpus.len()))
    })
    .await;

    // A certificate of agent-0 claiming another name is refused and audited.
    let stolen = pki.agent("stolen", "agent-0");
    c.start_agent_as(host_agent("impostor", 1, &tls_flags(&stolen, &pki.ca())));
    // A certificate the CA may not give (outside `agent-*`) is refused.
    let rogue = pki.agent("rogue-1", "rogue-1");
    c.start_agent_as(host_agent("rogue-1", 1, &tls_flags(&rogue, &pki.ca())));
    // A certificate of another CA fails the handshake.
    let foreign = Pki::new(&dir.path().join("foreign"), "foreign");
    let outsider = foreign.agent("outsider", "outsider");
    c.start_agent_as(host_agent("outsider", 1, &tls_flags(&outsider, &pki.ca())));
    eventually(
        "the impostor's denial in the audit trail",
        AGENT_TIMEOUT,
        || async {
            let out = c
                .cli_ok_as(Some(&admin), &["-o", "json", "audit", "list"])
                .await;
            let events: serde_json::Value =
                serde_json::from_str(&out).map_err(|e| e.to_string())?;
            let denied = events["events"].as_array().is_some_and(|events| {
                events
                    .iter()
                    .any(|e| e["code"] == "PERMISSION_DENIED" && e["target"] == "impostor")
            });
            denied.then_some(()).ok_or(out)
        },
    )
    .await;
    eventually("the outsider's failed handshake", AGENT_TIMEOUT, || async {
        let log = c.coordinator_log();
        let refused = log
            .lines()
            .any(|l| l.contains("TLS handshake refused") && l.to_lowercase().contains("cert"));
        let agent = c.agent_log("outsider");
        (refused && agent.contains("refused the session"))
            .then_some(())
            .ok_or(format!("coordinator:\n{log}\noutsider:\n{agent}"))
    })
    .await;
    let gpus = live_gpus(&c, &admin).await.unwrap();
    assert_eq!(gpus.len(), 1, "only agent-0's GPU: {gpus:?}");
    let impostor = c.agent_log("impostor");
    assert!(
        impostor.contains("cannot register as \"impostor\" (PermissionDenied)"),
        "{impostor}"
    );
    eventually(
        "rogue-1 refused by the allowlist",
        AGENT_TIMEOUT,
        || async {
            let rogue = c.agent_log("rogue-1");
            (rogue.contains("may certify agents named agent-* only"))
                .then_some(())
                .ok_or(rogue)
        },
    )
    .await;
    let out = c
        .cli_ok_as(Some(&admin), &["-o", "json", "audit", "list"])
        .await;
    let events: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        events["events"].as_array().unwrap().iter().any(|e| {
            e["code"] == "PERMISSION_DENIED"
                && e["target"] == "rogue-1"
                && e["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("may not certify"))
        }),
        "no audit row of rogue-1's refusal in {out}"
    );

    // grpcurl, as a user types it: -cacert and the bearer header.
    let out = std::process::Command::new(grpcurl())
        .arg("-cacert")
        .arg(pki.ca())
        .arg("-H")
        .arg(format!("authorization: Bearer {admin}"))
        .arg(format!("127.0.0.1:{}", c.port))
        .arg("cohort.v1.GpuService/ListGpus")
        .output()
        .expect("running grpcurl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("agent-0"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = std::process::Command::new(grpcurl())
        .arg("-cacert")
        .arg(pki.ca())
        .arg(format!("127.0.0.1:{}", c.port))
        .arg("cohort.v1.GpuService/ListGpus")
        .output()
        .expect("running grpcurl");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Unauthenticated"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Rotation: the server's files replaced by a certificate of a new CA,
    // then SIGHUP. New connections get the new certificate.
    let next = Pki::new(&dir.path().join("next"), "next");
    let rotated = next.server("server");
    assert!(
        c.channel_with(Some(&next.ca())).await.is_err(),
        "the new CA is not in use yet"
    );
    std::fs::copy(&rotated.cert, &server.cert).unwrap();
    std::fs::copy(&rotated.key, &server.key).unwrap();
    c.signal_coordinator(0, nix::sys::signal::Signal::SIGHUP);
    eventually(
        "the rotated certificate",
        Duration::from_secs(10),
        || async {
            match c.channel_with(Some(&next.ca())).await {
                Ok(channel) => GpuServiceClient::new(channel)
                    .list_gpus(authed(v1::ListGpusRequest::default(), &admin))
                    .await
                    .map(|_| ())
                    .map_err(|s| format!("{s:?}")),
                Err(e) => Err(format!("{e:?}")),
            }
        },
    )
    .await;
    assert!(
        c.coordinator_log()
            .contains("TLS certificate and keys reloaded"),
        "{}",
        c.coordinator_log()
    );

    // The agent's side: SIGHUP reconnects with its files as they are. With
    // the old CA it cannot trust the rotated server; with the new one it
    // registers again, its GPU live, without a restart.
    let registrations = |log: &str| log.matches("registered with the coordinator").count();
    assert_eq!(registrations(&c.agent_log("agent-0")), 1);
    c.signal_agent("agent-0", nix::sys::signal::Signal::SIGHUP);
    eventually(
        "agent-0 refusing the rotated server",
        AGENT_TIMEOUT,
        || async {
            let log = c.agent_log("agent-0");
            let after = log.split("SIGHUP: reconnecting").nth(1).unwrap_or_default();
            after
                .contains("no coordinator session")
                .then_some(())
                .ok_or(log.clone())
        },
    )
    .await;
    std::fs::copy(next.ca(), &agent_trust).unwrap();
    c.signal_agent("agent-0", nix::sys::signal::Signal::SIGHUP);
    eventually("agent-0 registered again", AGENT_TIMEOUT, || async {
        let log = c.agent_log("agent-0");
        (registrations(&log) == 2).then_some(()).ok_or(log.clone())
    })
    .await;
    eventually("agent-0's GPU live again", AGENT_TIMEOUT, || async {
        let live = live_trusting(&c, &next.ca(), &admin).await?;
        (live == 1).then_some(()).ok_or(format!("{live} live"))
    })
    .await;

    // The agent CA is replaced (a compromised CA, say) and reloaded: the
    // session of agent-0, whose certificate the old CA signed, ends at
    // once, and it cannot come back with that certificate.
    std::fs::copy(next.ca(), pki.ca()).unwrap();
    c.signal_coordinator(0, nix::sys::signal::Signal::SIGHUP);
    eventually(
        "agent-0's session ended by the CA reload",
        Duration::from_secs(10),
        || async {
            let live = live_trusting(&c, &next.ca(), &admin).await?;
            (live == 0 && c.coordinator_log().contains("no longer verifies"))
                .then_some(())
                .ok_or(format!("{live} live"))
        },
    )
    .await;
    holds(
        "agent-0 stays out with a certificate of the replaced CA",
        Duration::from_secs(3),
        || async {
            let log = c.agent_log("agent-0");
            (registrations(&log) == 2)
                .then_some(())
                .ok_or(format!("it registered again: {log}"))
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_teams_revocation_queue_cap_and_audit() {
    let mut c = Cluster::prepare(ClusterOptions {
        security: Security::tokens(),
        coordinator_args: vec!["--max-queued-per-team".into(), "50".into()],
        ..ClusterOptions::new(Backend::Sqlite, 0)
    });
    let root = c.bootstrap_token("ops", "root", "cluster-admin");
    c.launch().await;

    // Tokens through the CLI: the secret is the last line.
    let mut secrets = std::collections::HashMap::new();
    for (team, name, role) in [
        ("vision", "lead", "admin"),
        ("vision", "dev", "editor"),
        ("vision", "intern", "viewer"),
        ("nlp", "dev", "editor"),
    ] {
        let out = c
            .cli_ok_as(
                Some(&root),
                &[
                    "admin", "token", "create", "--team", team, "--name", name, "--role", role,
                ],
            )
            .await;
        let secret = out.lines().last().unwrap().trim().to_string();
        secrets.insert(format!("{team}/{name}"), secret);
    }
    let token = |k: &str| secrets[k].clone();
    let dup = c
        .cli_as(
            Some(&root),
            &[
                "admin", "token", "create", "--team", "nlp", "--name", "dev", "--role", "viewer",
            ],
        )
        .await;
    assert_eq!(dup.status.code(), Some(6), "{dup:?}");

    let mut trainings = TrainingServiceClient::new(c.channel().await);
    let mut admin = AdminServiceClient::new(c.channel().await);
    let job = SaeJob::small();

    // No token, a wrong token: UNAUTHENTICATED.
    expect_error(
        "no token",
        trainings
            .list_trainings(v1::ListTrainingsRequest::default())
            .await,
        Code::Unauthenticated,
        Reason::Unauthenticated,
    );
    expect_error(
        "a made-up token",
        trainings
            .list_trainings(authed(
                v1::ListTrainingsRequest::default(),
                "cohort_0123456789abcdef",
            ))
            .await,
        Code::Unauthenticated,
        Reason::Unauthenticated,
    );

    // A viewer reads but cannot create; an editor creates (no agent: QUEUED).
    expect_error(
        "a viewer creating",
        trainings
            .create_training(authed(
                create_request(&job, 1, true),
                &token("vision/intern"),
            ))
            .await,
        Code::PermissionDenied,
        Reason::PermissionDenied,
    );
    let vision_job = trainings
        .create_training(authed(create_request(&job, 1, true), &token("vision/dev")))
        .await
        .expect("an editor creates")
        .into_inner();
    assert_eq!(vision_job.team, "vision");
    assert_eq!(vision_job.creator, "dev");
    let nlp_job = trainings
        .create_training(authed(create_request(&job, 1, true), &token("nlp/dev")))
        .await
        .unwrap()
        .into_inner();

    // Teams: each sees its own; another team's training is PERMISSION_DENIED.
    let listed = trainings
        .list_trainings(authed(
            v1::ListTrainingsRequest::default(),
            &token("vision/intern"),
        ))
        .await
        .unwrap()
        .into_inner()
        .trainings;
    assert_eq!(
        listed.iter().map(|t| t.id.clone()).collect::<Vec<_>>(),
        vec![vision_job.id.clone()]
    );
    expect_error(
        "nlp reading vision's training",
        trainings
            .get_training(authed(
                v1::GetTrainingRequest {
                    id: vision_job.id.clone(),
                },
                &token("nlp/dev"),
            ))
            .await,
        Code::PermissionDenied,
        Reason::PermissionDenied,
    );
    let refused = trainings
        .cancel_training(authed(
            v1::CancelTrainingRequest {
                id: vision_job.id.clone(),
                ..Default::default()
            },
            &token("nlp/dev"),
        ))
        .await;
    // The audit row names the training and its team; the caller sees neither.
    let metadata = refused.as_ref().unwrap_err().metadata();
    assert!(
        metadata.get("cohort-audit-target").is_none()
            && metadata.get("cohort-audit-target-team").is_none(),
        "the denial's audit target leaked to the caller: {metadata:?}"
    );
    expect_error(
        "nlp cancelling vision's training",
        refused,
        Code::PermissionDenied,
        Reason::PermissionDenied,
    );
    // A missing id reads the same to a team-scoped caller (nothing leaks).
    expect_error(
        "nlp reading a training that does not exist",
        trainings
            .get_training(authed(
                v1::GetTrainingRequest {
                    id: "t-nope".into(),
                },
                &token("nlp/dev"),
            ))
            .await,
        Code::PermissionDenied,
        Reason::PermissionDenied,
    );
    let all = trainings
        .list_trainings(authed(v1::ListTrainingsRequest::default(), &root))
        .await
        .unwrap()
        .into_inner()
        .trainings;
    assert_eq!(all.len(), 2, "a cluster admin sees every team's");

    // A team admin manages its own team's tokens only; an editor none.
    let made = admin
        .create_token(authed(
            v1::CreateTokenRequest {
                team: "vision".into(),
                name: "ci".into(),
                role: v1::Role::Editor as i32,
                ttl: None,
            },
            &token("vision/lead"),
        ))
        .await;
    assert!(made.is_ok(), "{made:?}");
    expect_error(
        "vision's admin making an nlp token",
        admin
            .create_token(authed(
                v1::CreateTokenRequest {
                    team: "nlp".into(),
                    name: "x".into(),
                    role: v1::Role::Viewer as i32,
                    ttl: None,
                },
                &token("vision/lead"),
            ))
            .await,
        Code::PermissionDenied,
        Reason::PermissionDenied,
    );
    // A team admin cannot revoke a token above its role, even of its team.
    let boss = c
        .cli_ok_as(
            Some(&root),
            &[
                "admin",
                "token",
                "create",
                "--team",
                "vision",
                "--name",
                "boss",
                "--role",
                "cluster-admin",
            ],
        )
        .await;
    let boss = boss.lines().last().unwrap().trim().to_string();
    expect_error(
        "a team admin revoking its team's cluster-admin token",
        admin
            .revoke_token(authed(
                v1::RevokeTokenRequest {
                    team: "vision".into(),
                    name: "boss".into(),
                },
                &token("vision/lead"),
            ))
            .await,
        Code::PermissionDenied,
        Reason::PermissionDenied,
    );
    let still = c.cli_ok_as(Some(&boss), &["-o", "json", "whoami"]).await;
    assert!(still.contains("\"boss\""), "{still}");
    c.cli_ok_as(
        Some(&root),
        &["admin", "token", "revoke", "--team", "vision", "boss"],
    )
    .await;
    expect_error(
        "a team admin granting cluster-admin",
        admin
            .create_token(authed(
                v1::CreateTokenRequest {
                    team: "vision".into(),
                    name: "up".into(),
                    role: v1::Role::ClusterAdmin as i32,
                    ttl: None,
                },
                &token("vision/lead"),
            ))
            .await,
        Code::PermissionDenied,
        Reason::PermissionDenied,
    );
    expect_error(
        "an editor listing tokens",
        admin
            .list_tokens(authed(
                v1::ListTokensRequest::default(),
                &token("vision/dev"),
            ))
            .await,
        Code::PermissionDenied,
        Reason::PermissionDenied,
    );
    expect_error(
        "a team admin setting quotas",
        admin
            .set_quota(authed(
                v1::SetQuotaRequest {
                    team: "vision".into(),
                    gpus: Some(100),
                    max_queued: None,
                    ..Default::default()
                },
                &token("vision/lead"),
            ))
            .await,
        Code::PermissionDenied,
        Reason::PermissionDenied,
    );

    // The queue cap: vision may have 1 QUEUED; the next is QUEUE_FULL.
    c.cli_ok_as(
        Some(&root),
        &["admin", "quota", "set", "vision", "--max-queued", "1"],
    )
    .await;
    expect_error(
        "vision's second queued training",
        trainings
            .create_training(authed(create_request(&job, 1, true), &token("vision/dev")))
            .await,
        Code::ResourceExhausted,
        Reason::QueueFull,
    );
    let quotas = c.cli_ok_as(Some(&root), &["admin", "quota", "list"]).await;
    assert!(
        quotas
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["vision", "none", "none", "1", "any", "0", "0", "0", "0.0", "1", "1"]),
        "{quotas}"
    );

    // The editor cancels its own.
    trainings
        .cancel_training(authed(
            v1::CancelTrainingRequest {
                id: vision_job.id.clone(),
                ..Default::default()
            },
            &token("vision/dev"),
        ))
        .await
        .expect("cancel own training");

    // Streams held open under the token: they end when it is revoked.
    let mut watch = TrainingServiceClient::new(c.channel().await)
        .watch_training(authed(
            v1::WatchTrainingRequest {
                id: nlp_job.id.clone(),
                after_sequence: 0,
                include_rank_stats: false,
                max_points: 0,
            },
            &token("nlp/dev"),
        ))
        .await
        .expect("WatchTraining under nlp/dev")
        .into_inner();
    let mut alerts = TelemetryServiceClient::new(c.channel().await)
        .watch_alerts(authed(v1::WatchAlertsRequest::default(), &token("nlp/dev")))
        .await
        .expect("WatchAlerts under nlp/dev")
        .into_inner();
    // Revocation takes effect within 5 s.
    let out = c
        .cli_ok_as(
            Some(&root),
            &["admin", "token", "revoke", "--team", "nlp", "dev"],
        )
        .await;
    assert!(out.contains("revoked token nlp/dev"), "{out}");
    let revoked_at = tokio::time::Instant::now();
    eventually(
        "the revoked token refused",
        Duration::from_secs(5),
        || async {
            let mut client = TrainingServiceClient::new(c.channel().await);
            match client
                .list_trainings(authed(
                    v1::ListTrainingsRequest::default(),
                    &token("nlp/dev"),
                ))
                .await
            {
                Err(s) if s.code() == Code::Unauthenticated => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert!(revoked_at.elapsed() <= Duration::from_secs(5));
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match watch.message().await {
                Ok(Some(_)) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("WatchTraining still open 5 s after its token was revoked");
    let status = ended.expect_err("the watch ends with an error");
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    assert!(status.message().contains("revoked"), "{status:?}");
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match alerts.message().await {
                Ok(Some(_)) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("WatchAlerts still open 5 s after its token was revoked");
    assert_eq!(
        ended.expect_err("WatchAlerts ends with an error").code(),
        Code::Unauthenticated
    );
    assert!(
        revoked_at.elapsed() <= Duration::from_secs(5),
        "streams ended {:?} after the revocation",
        revoked_at.elapsed()
    );

    // An expired token stops working the same way.
    let out = c
        .cli_ok_as(
            Some(&root),
            &[
                "admin", "token", "create", "--team", "nlp", "--name", "brief", "--role", "viewer",
                "--ttl", "3s",
            ],
        )
        .await;
    let brief = out.lines().last().unwrap().trim().to_string();
    let me = c.cli_ok_as(Some(&brief), &["-o", "json", "whoami"]).await;
    assert!(me.contains("\"brief\""), "{me}");
    eventually(
        "the expired token refused",
        Duration::from_secs(3 + 5),
        || async {
            let out = c.cli_as(Some(&brief), &["whoami"]).await;
            (out.status.code() == Some(9))
                .then_some(())
                .ok_or(format!("{out:?}"))
        },
    )
    .await;

    // The audit trail: the creations, the cancel, the denials, the
    // revocation; a team admin sees its team's alone.
    let out = c
        .cli_ok_as(Some(&root), &["-o", "json", "audit", "list"])
        .await;
    let events: serde_json::Value = serde_json::from_str(&out).unwrap();
    for (method, code) in [
        ("CreateTraining", "OK"),
        ("CreateTraining", "PERMISSION_DENIED"),
        ("CancelTraining", "OK"),
        ("CancelTraining", "PERMISSION_DENIED"),
        ("CreateToken", "OK"),
        ("RevokeToken", "OK"),
        ("SetQuota", "OK"),
        ("CreateTraining", "RESOURCE_EXHAUSTED"),
    ] {
        assert!(
            audit_has(&events, method, code),
            "no {method} {code} in {out}"
        );
    }
    let cross_team = format!("training {}", vision_job.id);
    assert!(
        events["events"].as_array().unwrap().iter().any(|e| {
            e["method"]
                .as_str()
                .is_some_and(|m| m.ends_with("CancelTraining"))
                && e["code"] == "PERMISSION_DENIED"
                && e["actor_team"] == "nlp"
                && e["target"] == cross_team.as_str()
                && e["target_team"] == "vision"
        }),
        "no denial naming {cross_team} of team vision in {out}"
    );
    let out = c
        .cli_ok_as(
            Some(&token("vision/lead")),
            &["-o", "json", "audit", "list"],
        )
        .await;
    let events: serde_json::Value = serde_json::from_str(&out).unwrap();
    for e in events["events"].as_array().unwrap() {
        let teams = [
            e["actor_team"].as_str().unwrap_or(""),
            e["target_team"].as_str().unwrap_or(""),
        ];
        assert!(teams.contains(&"vision"), "vision's admin saw {e}");
    }
    let denied = c
        .cli_as(
            Some(&token("vision/lead")),
            &["audit", "list", "--team", "nlp"],
        )
        .await;
    assert_eq!(denied.status.code(), Some(9), "{denied:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_hold_a_team_back_and_gpus_are_redacted() {
    let (mut c, [root, vision, nlp]) = Cluster::with_team_tokens(vec![]).await;
    c.start_agent_as(host_agent("agent-0", 3, &[]));
    eventually("three GPUs", AGENT_TIMEOUT, || async {
        let n = live_gpus(&c, &root).await?.len();
        (n == 3).then_some(()).ok_or(format!("{n} GPUs"))
    })
    .await;
    c.cli_ok_as(
        Some(&root),
        &["admin", "quota", "set", "vision", "--gpus", "1"],
    )
    .await;

    let job = SaeJob::with_steps(1_000_000);
    let mut trainings = TrainingServiceClient::new(c.channel().await);
    let create = |token: String| {
        let channel = c.channel();
        let request = create_request(&job, 1, true);
        async move {
            TrainingServiceClient::new(channel.await)
                .create_training(authed(request, &token))
                .await
                .expect("create")
                .into_inner()
        }
    };
    let first = create(vision.clone()).await;
    let second = create(vision.clone()).await;
    let other = create(nlp.clone()).await;
    let state = |id: String, token: String| {
        let channel = c.channel();
        async move {
            TrainingServiceClient::new(channel.await)
                .get_training(authed(v1::GetTrainingRequest { id }, &token))
                .await
                .map(|r| r.into_inner())
                .map_err(|s| format!("{s:?}"))
        }
    };
    eventually(
        "vision's first and nlp's training running",
        AGENT_TIMEOUT,
        || async {
            let a = state(first.id.clone(), vision.clone()).await?;
            let b = state(other.id.clone(), nlp.clone()).await?;
            (a.state() == v1::training::State::Running && b.state() == v1::training::State::Running)
                .then_some(())
                .ok_or(format!("{:?} {:?}", a.state(), b.state()))
        },
    )
    .await;
    // A free GPU is left, but vision's quota holds its second back.
    let held = state(second.id.clone(), vision.clone()).await.unwrap();
    assert_eq!(held.state(), v1::training::State::Queued);
    assert!(
        held.state_reason
            .starts_with(Reason::QuotaExceeded.as_str()),
        "{}",
        held.state_reason
    );

    // nlp sees that a GPU is taken, not by what: the holder is redacted.
    let gpus = live_gpus(&c, &nlp).await.unwrap();
    let holders: Vec<&str> = gpus
        .iter()
        .map(|g| g.training_id.as_str())
        .filter(|t| !t.is_empty())
        .collect();
    assert_eq!(
        holders,
        vec![other.id.as_str()],
        "nlp sees only its own training on a GPU"
    );
    assert_eq!(
        gpus.iter()
            .filter(|g| g.availability() == v1::GpuAvailability::Busy)
            .count(),
        2,
        "both held GPUs read busy: {gpus:?}"
    );

    // Watches are scoped too: vision's training cannot be watched by nlp,
    // nor its GPUs' telemetry filtered by it; nlp's live telemetry names
    // only nlp's training.
    let denied = TrainingServiceClient::new(c.channel().await)
        .watch_training(authed(
            v1::WatchTrainingRequest {
                id: first.id.clone(),
                ..Default::default()
            },
            &nlp,
        ))
        .await;
    expect_error(
        "nlp watching vision's training",
        denied.map(|_| ()),
        Code::PermissionDenied,
        Reason::PermissionDenied,
    );
    let by_vision = v1::GpuMetricsFilter {
        training_id: first.id.clone(),
        ..Default::default()
    };
    let denied = TelemetryServiceClient::new(c.channel().await)
        .watch_gpu_metrics(authed(
            v1::WatchGpuMetricsRequest {
                filter: Some(by_vision),
                ..Default::default()
            },
            &nlp,
        ))
        .await;
    expect_error(
        "nlp's telemetry of vision's training",
        denied.map(|_| ()),
        Code::PermissionDenied,
        Reason::PermissionDenied,
    );
    let mut live = TelemetryServiceClient::new(c.channel().await)
        .watch_gpu_metrics(authed(v1::WatchGpuMetricsRequest::default(), &nlp))
        .await
        .expect("nlp watches the fleet")
        .into_inner();
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < 3 {
        let update = tokio::time::timeout(AGENT_TIMEOUT, live.message())
            .await
            .expect("a telemetry update in time")
            .expect("the stream stays up")
            .expect("the stream stays open");
        for g in update.gpus {
            let uuid = g
                .sample
                .as_ref()
                .map(|s| s.gpu_uuid.clone())
                .unwrap_or_default();
            assert!(
                g.training_id.is_empty() || g.training_id == other.id,
                "nlp saw {} on {uuid}",
                g.training_id
            );
            seen.insert(uuid);
        }
    }

    // Raising the quota lets the second one run.
    c.cli_ok_as(
        Some(&root),
        &["admin", "quota", "set", "vision", "--gpus", "2"],
    )
    .await;
    eventually("vision's second running", AGENT_TIMEOUT, || async {
        let s = state(second.id.clone(), vision.clone()).await?;
        (s.state() == v1::training::State::Running)
            .then_some(())
            .ok_or(format!("{:?}", s.state()))
    })
    .await;
    for (id, token) in [(first.id, &vision), (second.id, &vision), (other.id, &nlp)] {
        trainings
            .cancel_training(authed(
                v1::CancelTrainingRequest {
                    id,
                    ..Default::default()
                },
                token,
            ))
            .await
            .expect("cancel");
    }
}

#[tokio::test]
async fn an_open_listener_needs_authentication() {
    // The coordinator with `flags` on 0.0.0.0 must exit non-zero: its stderr.
    async fn refused(flags: &[&str]) -> String {
        let dir = temp();
        let output = tokio::process::Command::new(&binaries().coordinator)
            .args(["--listen", "0.0.0.0:0", "--data-dir"])
            .arg(dir.path())
            .args(flags)
            .env_remove("COHORT_DATABASE_URL")
            .env_remove("COHORT_AUTH")
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(!output.status.success(), "started with {flags:?}: {stderr}");
        stderr
    }
    let stderr = refused(&["--auth", "none"]).await;
    assert!(stderr.contains("--insecure"), "{stderr}");
    // token auth alone (the default off loopback) is not enough without TLS
    let stderr = refused(&[]).await;
    assert!(
        stderr.contains("TLS (--tls-cert and --tls-key)"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_outside_the_roots_is_refused() {
    let mut options = ClusterOptions::new(Backend::Sqlite, 1);
    options.gpus_per_agent = 1;
    let roots = temp();
    let data = roots.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    options.agent_args = vec!["--data-root".into(), data.display().to_string()];
    let cluster = Cluster::start(options).await;

    // Checkpoint storage outside the root: refused before a rank starts.
    let job = SaeJob::small();
    let config = cluster.root().join("escape.toml");
    let escape = job.toml().replace(
        "[checkpoint]\n",
        "[checkpoint]\nstorage = \"/etc/cohort-escape\"\n",
    );
    std::fs::write(&config, escape).unwrap();
    let id = cluster.submit(&config, &[]).await;
    let t = cluster
        .wait_state(&id, v1::training::State::Failed, Duration::from_secs(60))
        .await;
    assert!(
        t.state_reason.contains(Reason::DataOutsideRoots.as_str()),
        "{}",
        t.state_reason
    );
    assert!(
        t.state_reason.contains("/etc/cohort-escape"),
        "{}",
        t.state_reason
    );
    assert_eq!(
        t.restart_count, 0,
        "a refusal is the user's error: no restart"
    );
    assert!(!std::path::Path::new("/etc/cohort-escape").exists());

    // A shard in the root that is a symbolic link to a file outside: the
    // directory passes the agent's check, and the rank, which checks each
    // shard file with its links resolved, refuses it.
    let outside = temp();
    let shard = outside.path().join("acts.npy");
    write_npy(&shard, 64, 32);
    std::os::unix::fs::symlink(&shard, data.join("acts.npy")).unwrap();
    let linked = format!(
        "{}\n[data.files]\npaths = [\"{}/\"]\n",
        job_without_data(&SaeJob::small()),
        data.display()
    );
    let config = cluster.root().join("linked.toml");
    std::fs::write(&config, linked).unwrap();
    let id = cluster.submit(&config, &[]).await;
    let t = cluster
        .wait_state(&id, v1::training::State::Failed, Duration::from_secs(60))
        .await;
    assert!(
        t.state_reason.contains(Reason::DataOutsideRoots.as_str()),
        "{}",
        t.state_reason
    );
}

/// The small job's TOML without its synthetic data table.
fn job_without_data(job: &SaeJob) -> String {
    let toml = job.toml();
    let start = toml.find("[data.synthetic]").unwrap();
    let end = toml[start..]
        .find("\n\n")
        .map_or(toml.len(), |i| start + i + 2);
    format!("{}{}", &toml[..start], &toml[end..])
}

/// A float32 .npy of `rows` x `cols`.
fn write_npy(path: &std::path::Path, rows: usize, cols: usize) {
    let header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
    let mut header = header.into_bytes();
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(b' ');
    }
    header.push(b'\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(&header);
    for i in 0..rows * cols {
        bytes.extend_from_slice(&((i % 7) as f32 * 0.1).to_le_bytes());
    }
    std::fs::write(path, bytes).unwrap();
}

/// Submits `config` as the holder of `token`; the new training's id.
async fn submit_as(c: &Cluster, token: &str, config: &std::path::Path) -> String {
    let out = c
        .cli_ok_as(
            Some(token),
            &[
                "-o",
                "json",
                "train",
                "submit",
                "--config",
                config.to_str().unwrap(),
                "--gpus",
                "1",
            ],
        )
        .await;
    let first = out.lines().next().unwrap_or_default();
    serde_json::from_str::<serde_json::Value>(first)
        .ok()
        .and_then(|j| j["id"].as_str().map(String::from))
        .unwrap_or_else(|| panic!("no id in {out}"))
}

/// Waits for `id` (as `token` sees it) to reach `state`.
async fn wait_for(c: &Cluster, token: &str, id: &str, state: v1::training::State) -> v1::Training {
    let what = format!("{id} to reach {state:?}");
    eventually(&what, Duration::from_secs(60), || async {
        let got = TrainingServiceClient::new(c.channel().await)
            .get_training(authed(v1::GetTrainingRequest { id: id.into() }, token))
            .await
            .expect("GetTraining")
            .into_inner();
        if got.state() == state {
            Ok(got)
        } else {
            Err(format!("{got:#?}\n{}", c.coordinator_log()))
        }
    })
    .await
}

/// Two teams on one agent: each team's data root is its own (a path under
/// the other's is refused before a rank starts, without a restart), and
/// ranks get a clean environment — their team's env file, never the
/// agent's own variables (its credentials) nor another team's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_teams_on_one_agent_reach_only_their_own() {
    let dir = temp();
    let (mut c, [root, vision, nlp]) = Cluster::with_team_tokens(vec![]).await;
    let (vision_dir, nlp_dir) = (dir.path().join("vision"), dir.path().join("nlp"));
    std::fs::create_dir_all(&vision_dir).unwrap();
    std::fs::create_dir_all(&nlp_dir).unwrap();
    write_npy(&vision_dir.join("acts.npy"), 256, 32);
    write_npy(&nlp_dir.join("acts.npy"), 256, 32);
    let vision_env = dir.path().join("vision.env");
    std::fs::write(&vision_env, "VISION_SECRET=only-vision\n").unwrap();
    let at = |p: &std::path::Path| p.display().to_string();
    c.start_agent_as(host_agent(
        "agent-0",
        2,
        &[
            "--team-data-root".into(),
            format!("vision={}", at(&vision_dir)),
            "--team-data-root".into(),
            format!("nlp={}", at(&nlp_dir)),
            "--team-env-file".into(),
            format!("vision={}", at(&vision_env)),
        ],
    ));
    eventually("two GPUs", AGENT_TIMEOUT, || async {
        let n = live_gpus(&c, &root).await?.len();
        (n == 2).then_some(()).ok_or(format!("{n} GPUs"))
    })
    .await;
    let config = |name: &str, data: &std::path::Path, steps: i64| {
        let path = dir.path().join(name);
        let text = format!(
            "{}\n[data.files]\npaths = [\"{}/\"]\n",
            job_without_data(&SaeJob::with_steps(steps)),
            data.display()
        );
        std::fs::write(&path, text).unwrap();
        path
    };

    // vision reaching into nlp's root: refused, never run, not retried.
    let id = submit_as(&c, &vision, &config("reach.toml", &nlp_dir, 50)).await;
    let refused = wait_for(&c, &vision, &id, v1::training::State::Failed).await;
    assert!(
        refused
            .state_reason
            .contains(Reason::DataOutsideRoots.as_str())
            && refused.state_reason.contains(&at(&nlp_dir)),
        "{}",
        refused.state_reason
    );
    assert_eq!(refused.restart_count, 0);

    // Each team on its own data: running, with its own environment only.
    let mine = submit_as(&c, &vision, &config("vision.toml", &vision_dir, 1_000_000)).await;
    let theirs = submit_as(&c, &nlp, &config("nlp.toml", &nlp_dir, 1_000_000)).await;
    wait_for(&c, &vision, &mine, v1::training::State::Running).await;
    wait_for(&c, &nlp, &theirs, v1::training::State::Running).await;
    let envs: Vec<std::collections::HashMap<String, String>> =
        eventually("both ranks", AGENT_TIMEOUT, || async {
            let pids = cohort_integration_tests::procs::rank_processes(&c.mark);
            (pids.len() == 2)
                .then(|| {
                    pids.iter()
                        .map(|&p| cohort_integration_tests::faults::environ(p))
                        .collect()
                })
                .ok_or(format!("{} rank processes", pids.len()))
        })
        .await;
    for env in &envs {
        let job = env.get("COHORT_JOB_ID").cloned().unwrap_or_default();
        assert!(
            !env.contains_key("AWS_SECRET_ACCESS_KEY"),
            "a rank inherited the agent's credentials: {env:?}"
        );
        assert!(env.contains_key("PATH"), "{env:?}");
        let secret = env.get("VISION_SECRET").map(String::as_str);
        if job == mine {
            assert_eq!(secret, Some("only-vision"), "{env:?}");
        } else {
            assert_eq!(job, theirs);
            assert_eq!(secret, None, "nlp's rank got vision's env file: {env:?}");
        }
        assert!(
            env.get(cohort_spec::roots::ENV)
                .is_some_and(|r| !r.contains(if job == mine { "/nlp" } else { "/vision" })),
            "{env:?}"
        );
    }
}

/// A team's checkpoints in its own bucket: the agent hands the team's
/// credentials to its ranks only (`--team-env-file`), the coordinator —
/// which has no AWS_* of its own here — reads the team's storage for a
/// download with the team's (`--team-env-file` on the coordinator), from
/// `<storage>/<training id>/` only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_s_checkpoints_in_s3_come_out_with_its_own_credentials() {
    let s3 = cohort_integration_tests::s3::S3Server::start();
    let dir = temp();
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    s3.upload_dir(&empty, "vision-ckpt", "runs");
    let env_file = dir.path().join("vision-s3.env");
    let text: String = s3.env().iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    std::fs::write(&env_file, text).unwrap();
    let team_env = format!("vision={}", env_file.display());
    let extra = vec!["--team-env-file".into(), team_env.clone()];
    let (mut c, [root, vision, _]) = Cluster::with_team_tokens(extra).await;
    c.start_agent_as(host_agent(
        "agent-0",
        1,
        &[
            "--team-env-file".into(),
            team_env,
            "--team-s3-prefix".into(),
            "vision=s3://vision-ckpt/runs".into(),
        ],
    ));
    eventually("one GPU", AGENT_TIMEOUT, || async {
        let n = live_gpus(&c, &root).await?.len();
        (n == 1).then_some(()).ok_or(format!("{n} GPUs"))
    })
    .await;
    let job = SaeJob::small();
    let config = dir.path().join("vision.toml");
    std::fs::write(
        &config,
        job.toml().replace(
            "[checkpoint]\n",
            "[checkpoint]\nstorage = \"s3://vision-ckpt/runs\"\n",
        ),
    )
    .unwrap();
    let id = submit_as(&c, &vision, &config).await;
    wait_for(&c, &vision, &id, v1::training::State::Succeeded).await;
    let out = dir.path().join("weights");
    let listed = c
        .cli_ok_as(
            Some(&vision),
            &[
                "checkpoints",
                "download",
                &id,
                "--out",
                out.to_str().unwrap(),
            ],
        )
        .await;
    assert!(out.join("manifest.json").is_file(), "{listed}");
    assert!(out.join("state.safetensors").is_file(), "{listed}");
}
