//! The web console's files on the coordinator's own port, as a browser gets
//! them (the real `curl`): over TLS with token auth on, pages and files are
//! served before authentication (they hold no tenant data) with their
//! security headers, while every gRPC call on the same port still needs its
//! token. The console's pages themselves are tested in a real Chromium
//! (console/tests/e2e).

use cohort_integration_tests::cluster::{Security, ServerTls};
use cohort_integration_tests::secure::{authed, Pki};
use cohort_integration_tests::{Backend, Cluster, ClusterOptions};
use cohort_proto::v1::admin_service_client::AdminServiceClient;
use std::process::Command;

/// `curl -i` of `url` trusting `ca`: (status, headers and body).
fn curl(ca: &std::path::Path, url: &str, extra: &[&str]) -> (u16, String) {
    let output = Command::new("curl")
        .args(["-s", "-i", "--max-time", "10", "--cacert"])
        .arg(ca)
        .args(extra)
        .arg(url)
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status from {url}: {text}"));
    (status, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_is_served_over_tls_beside_the_authenticated_api() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(&dir.path().join("pki"), "main");
    let server = pki.server("server");
    let mut c = Cluster::prepare(ClusterOptions {
        security: Security {
            tls: Some(ServerTls {
                pair: server,
                ca: pki.ca(),
            }),
            ..Security::tokens()
        },
        ..ClusterOptions::new(Backend::Sqlite, 0)
    });
    let token = c.bootstrap_token("vision", "dev", "viewer");
    c.launch().await;
    let ca = pki.ca();

    for page in [
        "/",
        "/trainings",
        "/trainings/trn-0123",
        "/new",
        "/alerts",
        "/admin",
    ] {
        let (status, text) = curl(&ca, &format!("{}{page}", c.url()), &[]);
        assert_eq!(status, 200, "{page}: {text}");
        let lower = text.to_ascii_lowercase();
        assert!(lower.contains("content-type: text/html"), "{page}: {text}");
        assert!(
            lower.contains("content-security-policy: default-src 'self'"),
            "{page}"
        );
        assert!(lower.contains("x-content-type-options: nosniff"), "{page}");
        // The built console, or (a coordinator built before it) the page
        // that says how to build it: either way a page titled cohort.
        assert!(text.contains("<title>cohort</title>"), "{page}: {text}");
    }
    let (status, _) = curl(&ca, &format!("{}/assets/no-such-file.js", c.url()), &[]);
    assert_eq!(status, 404);
    let (status, _) = curl(
        &ca,
        &format!("{}/assets/../../Cargo.toml", c.url()),
        &["--path-as-is"],
    );
    assert_eq!(status, 404, "a path that climbs is refused");
    // Plaintext on the TLS port is refused: the console is not served in clear.
    let plain = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "5",
        ])
        .arg(format!("{}/", c.plain_url()))
        .output()
        .expect("curl");
    assert_ne!(String::from_utf8_lossy(&plain.stdout), "200");

    // The API on the same port still wants a token, and takes it.
    let channel = c.channel().await;
    let mut admin = AdminServiceClient::new(channel.clone());
    let refused = admin
        .who_am_i(cohort_proto::v1::WhoAmIRequest {})
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);
    let me = admin
        .who_am_i(authed(cohort_proto::v1::WhoAmIRequest {}, &token))
        .await
        .expect("WhoAmI with the token")
        .into_inner();
    assert_eq!(me.team, "vision");
}
