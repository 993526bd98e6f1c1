//! The real `cohort` binary against an address where nothing listens.

use cohort_testkit::free_port;
use std::process::Command;

#[test]
fn unreachable_coordinator_is_a_human_error_with_exit_code_5() {
    let url = format!("http://127.0.0.1:{}", free_port());
    for args in [&["gpus"][..], &["train", "list"], &["agents"]] {
        let output = Command::new(env!("CARGO_BIN_EXE_cohort"))
            .args(["--coordinator", &url, "--connect-timeout", "3"])
            .args(args)
            .env_remove("COHORT_COORDINATOR")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(5), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with(&format!("error: cannot reach the coordinator at {url}: ")),
            "{stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "one line, no dump: {stderr}");
        assert!(output.stdout.is_empty());
    }
}

#[test]
fn json_mode_reports_errors_as_json() {
    let url = format!("http://127.0.0.1:{}", free_port());
    let output = Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args(["-o", "json", "--coordinator", &url, "agents"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(5));
    let v: serde_json::Value = serde_json::from_slice(&output.stderr).unwrap();
    assert_eq!(v["error"]["exit_code"], 5);
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("cannot reach the coordinator at"),
        "{message}"
    );
}

#[test]
fn env_var_names_the_coordinator() {
    let url = format!("http://127.0.0.1:{}", free_port());
    let output = Command::new(env!("CARGO_BIN_EXE_cohort"))
        .arg("gpus")
        .env("COHORT_COORDINATOR", &url)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(5));
    assert!(String::from_utf8_lossy(&output.stderr).contains(&url));
}

#[test]
fn usage_errors_exit_2_and_bad_config_exits_4_before_connecting() {
    let output = Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args(["train", "submit"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));

    let dir = std::env::temp_dir().join(format!("cohort-cli-it-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("bad.toml");
    std::fs::write(
        &config,
        "[model]\nd_in = 8\nd_sae = 16\n[optim]\nbatch_size = -1\nsteps = 10\n\
         [data.synthetic]\nnum_samples = 64\n",
    )
    .unwrap();
    // The config is read and checked before the coordinator is dialled.
    let url = format!("http://127.0.0.1:{}", free_port());
    let output = Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args(["--coordinator", &url, "train", "submit", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.starts_with("error: the config is invalid: optim.batch_size: "),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
