//! Real shards written by numpy, safetensors and pyarrow, streamed by real
//! ranks: a directory of mixed formats and types reads exactly the rows a
//! single f32 file holds; a run killed mid-epoch resumes bit-identical; every
//! malformed shard is a data error naming the file, before training starts.

mod common;

use common::*;
use std::path::Path;
use std::time::Duration;

const D_IN: i64 = 16;

/// 900 rows in chunks of 50 (every shard and row group holds whole chunks,
/// so a directory of shards and one file have the same chunk order).
fn files_config(paths: &[String], steps: i64, every: i64) -> String {
    let paths: Vec<String> = paths.iter().map(|p| format!("{p:?}")).collect();
    format!(
        r#"
[model]
d_in = {D_IN}
d_sae = 64
[optim]
batch_size = 16
steps = {steps}
seed = 5
[checkpoint]
every_steps = {every}
keep = 100
[data]
shuffle_chunk = 50
shuffle_buffer = 150
prefetch_batches = 3
[data.files]
paths = [{}]
[runtime]
log_every_steps = 5
rendezvous_timeout_s = 20
collective_timeout_s = 10
"#,
        paths.join(", ")
    )
}

fn mixed(dir: &Path) -> (String, String) {
    make_shards(&["mixed", &dir.display().to_string(), &D_IN.to_string(), "1"]);
    (
        dir.join("shards").display().to_string(),
        dir.join("all.npy").display().to_string(),
    )
}

#[test]
fn a_directory_of_mixed_shards_reads_exactly_the_rows_of_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let (shards, all) = mixed(dir.path());
    // 40 steps of 2 x 16 = 1.4 epochs of 900 rows: crosses an epoch boundary.
    let as_dir = write(
        dir.path(),
        "dir.toml",
        &files_config(std::slice::from_ref(&shards), 40, 0),
    );
    let as_file = write(dir.path(), "file.toml", &files_config(&[all], 40, 0));
    let a = run_group(&as_dir, &dir.path().join("dir"), 2);
    let b = run_group(&as_file, &dir.path().join("file"), 2);
    for r in a.iter().chain(&b) {
        assert_eq!(r.code, Some(0), "{}", r.stderr);
    }
    assert_eq!(checksum(&a[0]), checksum(&b[0]), "same rows, same order");
    assert_eq!(checksum(&a[0]), checksum(&a[1]));

    // The same shards named by a glob and by file:// URIs, one entry each.
    let parts: Vec<String> = ["a.npy", "b.safetensors"]
        .iter()
        .map(|f| format!("file://{shards}/{f}"))
        .chain([format!("{shards}/*.parquet")])
        .collect();
    let listed = write(dir.path(), "listed.toml", &files_config(&parts, 40, 0));
    let c = run_group(&listed, &dir.path().join("listed"), 2);
    assert_eq!(c[0].code, Some(0), "{}", c[0].stderr);
    assert_eq!(checksum(&c[0]), checksum(&b[0]));

    // data_wait_ms is reported by every rank.
    let waits = a[1]
        .lines
        .iter()
        .filter(|l| matches!(l, cohort_spec::progress::ProgressLine::RankStats { data_wait_ms, .. } if *data_wait_ms >= 0.0))
        .count();
    assert!(waits >= 2, "rank_stats with data_wait_ms: {waits}");
}

#[test]
fn shards_in_s3_read_exactly_the_rows_of_local_files() {
    let dir = tempfile::tempdir().unwrap();
    let (shards, all) = mixed(dir.path());
    let s3 = S3Server::start();
    s3.upload_dir(Path::new(&shards), "acts", "run-1/shards");
    let env = s3.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let local = write(dir.path(), "local.toml", &files_config(&[all], 30, 0));
    let expected = run_group(&local, &dir.path().join("local"), 2);
    assert_eq!(expected[0].code, Some(0), "{}", expected[0].stderr);
    for (name, entries) in [
        ("prefix", vec!["s3://acts/run-1/shards/".to_string()]),
        (
            "objects and a glob",
            vec![
                "s3://acts/run-1/shards/a.npy".to_string(),
                "s3://acts/run-1/shards/b.safetensors".to_string(),
                "s3://acts/run-1/shards/*.parquet".to_string(),
            ],
        ),
    ] {
        let cfg = write(dir.path(), "s3.toml", &files_config(&entries, 30, 0));
        let got = run_group_with(&cfg, &dir.path().join("s3"), 2, &env);
        assert_eq!(got[0].code, Some(0), "{name}: {}", got[0].stderr);
        assert_eq!(checksum(&got[0]), checksum(&expected[0]), "{name}");
    }
    // A missing object and an empty prefix are data errors naming them.
    for (entry, why) in [
        ("s3://acts/run-1/shards/zz.npy", "zz.npy"),
        ("s3://acts/nothing/", "holds no .npy"),
        ("s3://no-such-bucket/x/", "no-such-bucket"),
    ] {
        let cfg = write(
            dir.path(),
            "bad.toml",
            &files_config(&[entry.to_string()], 2, 0),
        );
        let r = finish(
            spawn(&cfg, &dir.path().join("bad"), 0, 1, free_port(), &env),
            Duration::from_secs(60),
        );
        assert_eq!(r.code, Some(4), "{entry}: {}", r.stderr);
        assert!(r.stderr.contains(why), "{entry}: {}", r.stderr);
    }
}

#[test]
fn a_run_killed_mid_epoch_resumes_bit_identical() {
    let dir = tempfile::tempdir().unwrap();
    let (shards, _) = mixed(dir.path());
    // 900 rows / (2 x 16) = 29 steps an epoch; killed after step 10 or later.
    let cfg = write(dir.path(), "c.toml", &files_config(&[shards], 45, 5));
    let straight = run_group(&cfg, &dir.path().join("straight"), 2);
    assert_eq!(straight[0].code, Some(0), "{}", straight[0].stderr);
    let run = dir.path().join("resumed");
    let at = kill_after_checkpoint(&cfg, &run, 2, 10);
    assert!(
        (10..45).contains(&at) && at % 29 != 0,
        "killed at step {at}"
    );
    let manifest = cohort_rank::checkpoint::latest(&run).unwrap().manifest;
    let sampler = manifest.sampler.expect("the manifest records the sampler");
    assert_eq!((sampler.epoch, sampler.batch), (at / 29, at % 29));
    assert_eq!(sampler.num_samples, 900);

    let resumed = run_group(&cfg, &run, 2);
    assert_eq!(resumed[0].code, Some(0), "{}", resumed[0].stderr);
    assert_eq!(start_step(&resumed[0]), Some(at));
    assert_eq!(checksum(&resumed[0]), checksum(&straight[0]));
    assert_eq!(checksum(&resumed[1]), checksum(&straight[0]));
}

#[test]
fn checkpoints_in_s3_let_another_host_resume_bit_identical() {
    let dir = tempfile::tempdir().unwrap();
    let (shards, _) = mixed(dir.path());
    let s3 = S3Server::start();
    s3.upload_dir(Path::new(&shards), "acts", "shards");
    // An empty directory uploads nothing but creates the bucket.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    s3.upload_dir(&empty, "ckpt", "x");
    let env = s3.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let text = files_config(&["s3://acts/shards/".to_string()], 45, 5)
        .replace("keep = 100", "keep = 2\nstorage = \"s3://ckpt/runs\"");
    let cfg = write(dir.path(), "c.toml", &text);
    let straight = run_group_with(
        &cfg,
        &dir.path().join("straight"),
        2,
        &[("COHORT_JOB_ID", "trn-a")]
            .iter()
            .chain(&env)
            .copied()
            .collect::<Vec<_>>(),
    );
    assert_eq!(straight[0].code, Some(0), "{}", straight[0].stderr);

    // Killed after a checkpoint; the gang restarts in fresh run dirs (other
    // hosts: nothing local survives) and resumes from the bucket.
    let job = [("COHORT_JOB_ID", "trn-b")];
    let env_b: Vec<(&str, &str)> = job.iter().chain(&env).copied().collect();
    let port = free_port();
    let mut ranks: Vec<Rank> = (0..2)
        .map(|r| spawn(&cfg, &dir.path().join("host-a"), r, 2, port, &env_b))
        .collect();
    let at = loop {
        let line = ranks[0]
            .lines
            .recv_timeout(Duration::from_secs(60))
            .expect("a checkpoint");
        if let Some(cohort_spec::progress::ProgressLine::Checkpoint { step, path, .. }) =
            cohort_spec::progress::ProgressLine::parse(&line)
        {
            assert_eq!(path, format!("s3://ckpt/runs/trn-b/step-{step:08}"));
            if step >= 15 {
                break step;
            }
        }
    };
    for r in &mut ranks {
        let _ = r.child.kill();
        let _ = r.child.wait();
    }
    std::fs::remove_dir_all(dir.path().join("host-a")).unwrap();
    let resumed = run_group_with(&cfg, &dir.path().join("host-b"), 2, &env_b);
    assert_eq!(resumed[0].code, Some(0), "{}", resumed[0].stderr);
    let start = start_step(&resumed[0]).unwrap();
    assert!(
        start >= at,
        "resumed at {start}, a checkpoint at {at} existed"
    );
    assert!(
        resumed[0]
            .stderr
            .contains("resuming from s3://ckpt/runs/trn-b/"),
        "{}",
        resumed[0].stderr
    );
    assert_eq!(checksum(&resumed[0]), checksum(&straight[0]));
    assert_eq!(checksum(&resumed[1]), checksum(&straight[0]));
    assert!(
        !dir.path().join("host-b/checkpoints").exists(),
        "nothing written locally"
    );
}

#[test]
fn thousands_of_shards_in_a_directory_train() {
    let dir = tempfile::tempdir().unwrap();
    let shards = dir.path().join("many");
    std::fs::create_dir(&shards).unwrap();
    for i in 0..2000 {
        tch::Tensor::randn([5, D_IN], (tch::Kind::Float, tch::Device::Cpu))
            .write_npy(shards.join(format!("shard-{i:05}.npy")))
            .unwrap();
    }
    let cfg = write(
        dir.path(),
        "c.toml",
        &files_config(&[shards.display().to_string()], 20, 0)
            .replace("shuffle_chunk = 50", "shuffle_chunk = 5")
            .replace("shuffle_buffer = 150", "shuffle_buffer = 640"),
    );
    let r = run_group(&cfg, &dir.path().join("run"), 2);
    assert_eq!(r[0].code, Some(0), "{}", r[0].stderr);
    assert_eq!(r[1].code, Some(0), "{}", r[1].stderr);
    assert_eq!(checksum(&r[0]), checksum(&r[1]));
}

#[test]
fn malformed_shards_are_data_errors_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    make_shards(&["bad", &d, &D_IN.to_string()]);
    let empty_dir = dir.path().join("empty");
    std::fs::create_dir(&empty_dir).unwrap();
    let cases = [
        (format!("{d}/ints.npy"), "is not a little-endian float"),
        (format!("{d}/truncated.npy"), "is truncated"),
        (
            format!("{d}/narrow.npy"),
            "rows have 15 values but model.d_in is 16",
        ),
        (format!("{d}/intlist.parquet"), "not floats"),
        (format!("{d}/ragged.parquet"), "do not all hold 16 values"),
        (
            format!("{d}/garbage.parquet"),
            "not a readable parquet file",
        ),
        (
            empty_dir.display().to_string(),
            "holds no .npy, .safetensors or .parquet",
        ),
        (format!("{d}/nothing-*.npy"), "matches no"),
        (format!("{d}/absent.npy"), "No such file"),
    ];
    for (i, (path, why)) in cases.iter().enumerate() {
        let cfg = write(
            dir.path(),
            &format!("{i}.toml"),
            &files_config(std::slice::from_ref(path), 2, 0),
        );
        let r = finish(
            spawn(
                &cfg,
                &dir.path().join(format!("run{i}")),
                0,
                1,
                free_port(),
                &[],
            ),
            Duration::from_secs(60),
        );
        assert_eq!(r.code, Some(4), "{path}: {}", r.stderr);
        assert!(
            r.stderr.contains(why),
            "{path}: wants {why:?}: {}",
            r.stderr
        );
        let name = Path::new(path).file_name().unwrap().to_string_lossy();
        assert!(r.stderr.contains(name.as_ref()), "{path}: {}", r.stderr);
        assert!(r.lines.is_empty(), "{path}: no training started");
    }
}
