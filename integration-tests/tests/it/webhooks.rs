//! Webhooks against a real HTTP server on 127.0.0.1: a team admin adds
//! hooks with the CLI, a training that succeeds and one that fails are
//! announced to them and to the operator's `--webhook`, each body signed
//! with its hook's secret; a hook that fails twice then recovers gets its
//! deliveries, one that stays down is given up (after `--webhook-retry-for`)
//! and says so in `cohort admin webhook list`; a Slack hook gets Slack's
//! body; bad input is refused.

use cohort_integration_tests::cluster::Security;
use cohort_integration_tests::program::*;
use cohort_integration_tests::secure::authed;
use cohort_integration_tests::{Backend, Cluster};
use cohort_testkit::eventually;
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One POST the server got.
#[derive(Debug, Clone)]
struct Received {
    path: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
    answered: u16,
}

/// An HTTP/1.1 server answering each path as told: `/flaky` 503 twice
/// then 200, `/down` 500 always, anything else 200.
#[derive(Clone, Default)]
struct Hooks {
    got: Arc<Mutex<Vec<Received>>>,
}

impl Hooks {
    async fn start() -> (Hooks, String) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let hooks = Hooks::default();
        let served = hooks.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let served = served.clone();
                tokio::spawn(async move { served.answer(stream).await });
            }
        });
        (hooks, url)
    }

    async fn answer(&self, mut stream: tokio::net::TcpStream) {
        let mut data = Vec::new();
        let mut buf = [0u8; 8192];
        let head_end = loop {
            let Ok(n) = stream.read(&mut buf).await else {
                return;
            };
            if n == 0 {
                return;
            }
            data.extend_from_slice(&buf[..n]);
            if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
        };
        let head = String::from_utf8_lossy(&data[..head_end]).to_string();
        let mut lines = head.lines();
        let path = lines
            .next()
            .unwrap_or_default()
            .split(' ')
            .nth(1)
            .unwrap_or_default()
            .to_string();
        let headers: HashMap<String, String> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let length: usize = headers
            .get("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        while data.len() < head_end + length {
            let Ok(n) = stream.read(&mut buf).await else {
                return;
            };
            if n == 0 {
                return;
            }
            data.extend_from_slice(&buf[..n]);
        }
        let answered = {
            let mut got = self.got.lock().unwrap();
            let before = got.iter().filter(|r| r.path == path).count();
            let answered = match path.as_str() {
                "/flaky" if before < 2 => 503,
                "/down" => 500,
                _ => 200,
            };
            got.push(Received {
                path: path.clone(),
                headers,
                body: data[head_end..head_end + length].to_vec(),
                answered,
            });
            answered
        };
        let reply =
            format!("HTTP/1.1 {answered} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        let _ = stream.write_all(reply.as_bytes()).await;
    }

    fn at(&self, path: &str) -> Vec<Received> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }
}

fn json(r: &Received) -> Value {
    serde_json::from_slice(&r.body).unwrap()
}

fn signed(secret: &str, r: &Received) -> bool {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(&r.body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    r.headers.get("x-cohort-signature") == Some(&format!("sha256={hex}"))
}

/// The secret `webhook add` printed, on its last line.
fn secret_of(output: &str) -> String {
    output.lines().last().unwrap().trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_hear_trainings_end_and_fail_signed_retried_and_given_up() {
    let (hooks, url) = Hooks::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ops_secret_file = dir.path().join("webhook.secret");
    std::fs::write(&ops_secret_file, "ops-secret\n").unwrap();
    let mut options = program_options(Backend::Sqlite, 1, &[]);
    options.security = Security::tokens();
    options.coordinator_args = vec![
        "--webhook".into(),
        format!("{url}/ops"),
        "--webhook-secret-file".into(),
        ops_secret_file.display().to_string(),
        "--webhook-retry-for".into(),
        "3s".into(),
        "--console-url".into(),
        "https://cohort.example".into(),
    ];
    options.defer_agents = true;
    let mut cluster = Cluster::prepare(options);
    let root = cluster.bootstrap_token("ops", "root", "cluster-admin");
    let vision = cluster.bootstrap_token("vision", "lead", "admin");
    let nlp = cluster.bootstrap_token("nlp", "lead", "admin");
    cluster.launch().await;
    // The agent (the launch's own wait asks with no token).
    cluster.start_agent(0);
    eventually("the agent's GPUs", Duration::from_secs(60), || async {
        let gpus = cluster
            .gpus()
            .await
            .list_gpus(authed(cohort_proto::v1::ListGpusRequest::default(), &root))
            .await
            .map_err(|s| s.to_string())?
            .into_inner()
            .gpus;
        if gpus.len() == 2 {
            Ok(())
        } else {
            Err(format!("{gpus:?}"))
        }
    })
    .await;

    // A team admin adds its hooks.
    let add = |path: &str, events: &str, format: &str| {
        [
            "admin".to_string(),
            "webhook".into(),
            "add".into(),
            "vision".into(),
            format!("{url}{path}"),
            "--events".into(),
            events.into(),
            "--format".into(),
            format.into(),
        ]
    };
    let strs = |v: &[String]| {
        v.iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join("\u{0}")
    };
    let run = |args: [String; 9]| {
        let cluster = &cluster;
        let vision = vision.clone();
        async move {
            let joined = strs(&args);
            let args: Vec<&str> = joined.split('\u{0}').collect();
            cluster.cli_ok_as(Some(&vision), &args).await
        }
    };
    let flaky_secret = secret_of(&run(add("/flaky", "ended,failed", "json")).await);
    let slack_secret = secret_of(&run(add("/slack", "failed", "slack")).await);
    let down_secret = secret_of(&run(add("/down", "ended", "json")).await);
    assert!(
        flaky_secret.len() >= 32 && flaky_secret != slack_secret && slack_secret != down_secret
    );

    // Bad input changes nothing.
    let refused = cluster
        .cli_as(
            Some(&vision),
            &["admin", "webhook", "add", "vision", "ftp://x/y"],
        )
        .await;
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("url"),
        "{refused:?}"
    );
    let refused = cluster
        .cli_as(
            Some(&vision),
            &[
                "admin",
                "webhook",
                "add",
                "vision",
                &url,
                "--events",
                "ended,nope",
            ],
        )
        .await;
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("\"nope\" is not one of"),
        "{refused:?}"
    );
    let other_team = cluster
        .cli_as(Some(&vision), &["admin", "webhook", "add", "nlp", &url])
        .await;
    assert!(!other_team.status.success(), "{other_team:?}");
    let missing = cluster
        .cli_as(Some(&vision), &["admin", "webhook", "remove", "whk-nope"])
        .await;
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("no such webhook"),
        "{missing:?}"
    );

    // One training of vision's succeeds, one fails at once (exit code 3);
    // one of nlp's succeeds (vision's hooks do not hear it).
    let mut training = cluster.training().await;
    let ok = steps_program(4, 0.05, 2, &[], 1, "", None);
    let ok_id = training
        .create_training(authed(ok.clone(), &vision))
        .await
        .expect("create")
        .into_inner()
        .id;
    let mut failing = ok;
    let program = failing.config.as_mut().unwrap().program.as_mut().unwrap();
    program.command = vec![
        cohort_testkit::python().display().to_string(),
        "-c".into(),
        "raise SystemExit(3)".into(),
    ];
    let failed_id = training
        .create_training(authed(failing.clone(), &vision))
        .await
        .expect("create")
        .into_inner()
        .id;
    let nlp_id = training
        .create_training(authed(steps_program(2, 0.05, 2, &[], 1, "", None), &nlp))
        .await
        .expect("create")
        .into_inner()
        .id;

    // The flaky hook: twice 503, then every announcement delivered.
    let delivered = eventually(
        "the flaky hook's deliveries",
        Duration::from_secs(120),
        || async {
            let ok: Vec<Value> = hooks
                .at("/flaky")
                .iter()
                .filter(|r| r.answered == 200)
                .map(json)
                .collect();
            let said = |id: &str, event: &str| {
                ok.iter()
                    .any(|b| b["training"]["id"] == id && b["event"] == event)
            };
            if said(&ok_id, "ended") && said(&failed_id, "ended") && said(&failed_id, "failed") {
                Ok(ok)
            } else {
                Err(format!("{ok:?}"))
            }
        },
    )
    .await;
    let flaky = hooks.at("/flaky");
    assert_eq!(flaky.iter().filter(|r| r.answered == 503).count(), 2);
    assert!(
        flaky.iter().all(|r| signed(&flaky_secret, r)),
        "every body signed with the hook's secret"
    );
    assert!(!flaky.iter().any(|r| signed(&slack_secret, r)));
    assert!(
        delivered
            .iter()
            .all(|b| b["training"]["id"] != nlp_id.as_str()),
        "another team's"
    );
    let failed = delivered.iter().find(|b| b["event"] == "failed").unwrap();
    assert_eq!(failed["training"]["state"], "FAILED");
    assert_eq!(failed["training"]["team"], "vision");
    assert_eq!(
        failed["training"]["link"],
        format!("https://cohort.example/trainings/{failed_id}")
    );
    let first = &flaky[0];
    assert_eq!(
        first.headers.get("x-cohort-event").map(String::as_str),
        Some(json(first)["event"].as_str().unwrap())
    );
    // A retry is the same delivery: same id, same body.
    let retried: Vec<&Received> = flaky.iter().filter(|r| r.body == first.body).collect();
    assert!(retried.len() >= 2, "{flaky:?}");
    assert!(retried
        .iter()
        .all(|r| r.headers.get("x-cohort-delivery") == first.headers.get("x-cohort-delivery")));

    // The operator's hook hears every team, signed with its file's secret.
    eventually("the operator's hook", Duration::from_secs(60), || async {
        let ops = hooks.at("/ops");
        let ids: Vec<Value> = ops
            .iter()
            .map(|r| json(r)["training"]["id"].clone())
            .collect();
        if [&ok_id, &failed_id, &nlp_id]
            .iter()
            .all(|id| ids.iter().any(|i| i == id.as_str()))
        {
            Ok(())
        } else {
            Err(format!("{ids:?}"))
        }
    })
    .await;
    assert!(hooks.at("/ops").iter().all(|r| signed("ops-secret", r)));

    // Slack's body for the failed event only.
    let slack = eventually("the Slack hook", Duration::from_secs(60), || async {
        match hooks.at("/slack").first() {
            Some(r) => Ok(r.clone()),
            None => Err("nothing yet".to_string()),
        }
    })
    .await;
    let text = json(&slack)["text"].as_str().unwrap().to_string();
    assert!(
        text.contains(&failed_id) && text.contains("is FAILED"),
        "{text}"
    );
    assert!(signed(&slack_secret, &slack));
    assert_eq!(hooks.at("/slack").len(), 1, "only `failed` was asked for");

    // The hook that stays down is given up after --webhook-retry-for, and
    // `webhook list` says what happened to each.
    let listed = eventually(
        "the down hook given up",
        Duration::from_secs(60),
        || async {
            let out = cluster
                .cli_ok_as(Some(&vision), &["-o", "json", "admin", "webhook", "list"])
                .await;
            let v: Value = serde_json::from_str(&out).unwrap();
            let hooks = v["webhooks"].as_array().cloned().unwrap_or_default();
            let down = hooks
                .iter()
                .find(|h| h["url"].as_str().is_some_and(|u| u.ends_with("/down")));
            match down {
                Some(d) if d["failed"].as_u64() >= Some(1) => Ok(hooks),
                _ => Err(out),
            }
        },
    )
    .await;
    assert!(hooks.at("/down").len() >= 2, "retried before giving up");
    assert!(down_secret.len() >= 32);
    let flaky_listed = listed
        .iter()
        .find(|h| h["url"].as_str().is_some_and(|u| u.ends_with("/flaky")))
        .unwrap();
    assert!(
        flaky_listed["delivered"].as_u64() >= Some(3),
        "{flaky_listed}"
    );
    assert!(flaky_listed.get("secret").is_none(), "never the secret");
    let table = cluster
        .cli_ok_as(Some(&vision), &["admin", "webhook", "list"])
        .await;
    assert!(
        table.contains("recent deliveries:") && table.contains("HTTP 500"),
        "{table}"
    );
    assert!(
        !table.contains("(all)"),
        "the operator's hooks are the cluster-admin's to see: {table}"
    );
    let everything = cluster
        .cli_ok_as(Some(&root), &["admin", "webhook", "list"])
        .await;
    assert!(
        everything.contains("flag-1") && everything.contains("(all)"),
        "{everything}"
    );

    // Removed: listed no more.
    let slack_id = listed
        .iter()
        .find(|h| h["format"] == "slack")
        .and_then(|h| h["id"].as_str())
        .unwrap()
        .to_string();
    cluster
        .cli_ok_as(Some(&vision), &["admin", "webhook", "remove", &slack_id])
        .await;
    let after = cluster
        .cli_ok_as(Some(&vision), &["admin", "webhook", "list"])
        .await;
    assert!(!after.contains(&slack_id), "{after}");
}
