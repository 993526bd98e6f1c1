//! Every bad input ends with its clear message and its exit code, in time.

mod common;

use common::*;
use std::path::Path;
use std::time::Duration;

fn run_one(cfg: &Path, run: &Path, world: i64, rank: i64, extra: &[(&str, &str)]) -> Finished {
    finish(
        spawn(cfg, run, rank, world, free_port(), extra),
        Duration::from_secs(60),
    )
}

fn files_config(d_in: i64, path: &Path) -> String {
    format!(
        "[model]\nd_in = {d_in}\n[optim]\nbatch_size = 8\nsteps = 2\n[data.files]\npaths = [{:?}]\n",
        path.display().to_string()
    )
}

#[test]
fn unknown_field_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "c.toml",
        &config(8, 2, 0).replace("d_sae = 128", "d_sae = 128\nwidth = 3"),
    );
    let r = run_one(&cfg, dir.path(), 1, 0, &[]);
    assert_eq!(r.code, Some(3));
    assert!(r.stderr.contains("unknown field `width`"), "{}", r.stderr);
}

#[test]
fn data_problems_are_data_errors() {
    let dir = tempfile::tempdir().unwrap();
    let npy = dir.path().join("acts.npy");
    tch::Tensor::randn([16, 24], (tch::Kind::Float, tch::Device::Cpu))
        .write_npy(&npy)
        .unwrap();
    let mismatch = write(dir.path(), "m.toml", &files_config(32, &npy));
    let r = run_one(&mismatch, dir.path(), 1, 0, &[]);
    assert_eq!(r.code, Some(4), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("rows have 24 values but model.d_in is 32"),
        "{}",
        r.stderr
    );

    let empty = dir.path().join("empty.npy");
    std::fs::write(&empty, b"").unwrap();
    let r = run_one(
        &write(dir.path(), "e.toml", &files_config(24, &empty)),
        dir.path(),
        1,
        0,
        &[],
    );
    assert_eq!(r.code, Some(4));
    assert!(r.stderr.contains("file is empty"), "{}", r.stderr);

    let missing = dir.path().join("nope.safetensors");
    let r = run_one(
        &write(dir.path(), "n.toml", &files_config(24, &missing)),
        dir.path(),
        1,
        0,
        &[],
    );
    assert_eq!(r.code, Some(4));
    assert!(r.stderr.contains("nope.safetensors"), "{}", r.stderr);

    // and the good file trains
    let r = run_one(
        &write(dir.path(), "ok.toml", &files_config(24, &npy)),
        &dir.path().join("ok"),
        1,
        0,
        &[],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
}

#[test]
fn safetensors_shards_train() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("acts.safetensors");
    let t = tch::Tensor::randn([32, 16], (tch::Kind::Float, tch::Device::Cpu));
    tch::Tensor::write_safetensors(&[("activations", &t)], &path).unwrap();
    let r = run_one(
        &write(dir.path(), "c.toml", &files_config(16, &path)),
        &dir.path().join("run"),
        1,
        0,
        &[],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
}

#[test]
fn bad_launch_environments_are_launch_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "c.toml", &config(8, 2, 0));
    let r = run_one(&cfg, dir.path(), 0, 0, &[]);
    assert_eq!(r.code, Some(2));
    assert!(
        r.stderr.contains("WORLD_SIZE=0 must be >= 1"),
        "{}",
        r.stderr
    );
    let r = run_one(&cfg, dir.path(), 2, 2, &[]);
    assert_eq!(r.code, Some(2));
    assert!(
        r.stderr.contains("RANK=2 must be in 0..WORLD_SIZE (2)"),
        "{}",
        r.stderr
    );
}

#[test]
fn unreachable_master_is_a_rendezvous_error_within_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "c.toml",
        &config(8, 2, 0).replace("rendezvous_timeout_s = 20", "rendezvous_timeout_s = 3"),
    );
    // nobody listens: rank 1 of 2 retries until its timeout
    let r = run_one(&cfg, dir.path(), 2, 1, &[]);
    assert_eq!(r.code, Some(10), "{}", r.stderr);
    assert!(r.stderr.contains("rendezvous failed"), "{}", r.stderr);
    assert!(r.elapsed < Duration::from_secs(15), "took {:?}", r.elapsed);
    // a name that does not resolve
    let r = run_one(
        &cfg,
        dir.path(),
        2,
        1,
        &[("MASTER_ADDR", "no-such-host.invalid")],
    );
    assert_eq!(r.code, Some(10), "{}", r.stderr);
    assert!(r.elapsed < Duration::from_secs(15), "took {:?}", r.elapsed);
    // rank 0 whose peer never comes
    let r = run_one(&cfg, dir.path(), 2, 0, &[]);
    assert_eq!(r.code, Some(10), "{}", r.stderr);
    assert!(r.elapsed < Duration::from_secs(15), "took {:?}", r.elapsed);
}
