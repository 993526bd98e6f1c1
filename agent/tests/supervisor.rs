//! The rank supervisor against real child processes: small shell scripts stand
//! in for `cohort-rank`.

// Tests may block: they are not the async runtime's production paths.
#![allow(clippy::disallowed_methods)]

use cohort_testkit::{eventually, eventually_blocking};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cohort_agent::supervisor::{
    RankEvent, RankEventKind, RankExit, RankKey, RankSpec, StopOutcome, Supervisor,
    SupervisorError, STDERR_TAIL_LINES,
};
use cohort_spec::progress::ProgressLine;
use cohort_spec::ExitClass;
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(20);

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn rank_spec(dir: &Path, program: PathBuf, job: &str, rank: u32) -> RankSpec {
    let config_path = dir.join("config.toml");
    std::fs::write(&config_path, "# test\n").unwrap();
    let run_dir = dir.join(format!("run-{job}-{rank}"));
    std::fs::create_dir_all(&run_dir).unwrap();
    RankSpec {
        key: RankKey::new(job, 0, rank),
        program,
        args: RankSpec::cohort_rank_args(&config_path, &run_dir),
        working_dir: run_dir.clone(),
        checkpoints: None,
        sandbox: None,
        log_path: dir.join(format!("rank-{job}-{rank}.log")),
        run_dir,
        world_size: 2,
        world_sizes: (2, 2),
        local_rank: rank,
        local_world_size: 2,
        group_rank: 0,
        group_world_size: 1,
        max_restarts: 0,
        master_addr: "127.0.0.1".into(),
        master_port: 29500,
        gpu_index: rank,
        cuda_visible_devices: String::new(),
        extra_env: vec![],
        base_env: vec![("PATH".into(), std::env::var("PATH").unwrap_or_default())],
        memory_limit: None,
        notice: None,
    }
}

fn supervisor(grace: Duration) -> (Supervisor, mpsc::Receiver<RankEvent>) {
    let (tx, rx) = mpsc::channel(256);
    (Supervisor::new(tx, grace), rx)
}

/// Collects this rank's events up to and including `Exited`.
async fn events_until_exit(
    rx: &mut mpsc::Receiver<RankEvent>,
    key: &RankKey,
) -> Vec<RankEventKind> {
    let mut kinds = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let event = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .expect("rank exited in time")
            .expect("event channel open");
        if &event.key != key {
            continue;
        }
        let done = matches!(event.kind, RankEventKind::Exited(_));
        kinds.push(event.kind);
        if done {
            return kinds;
        }
    }
}

fn exit_of(kinds: &[RankEventKind]) -> &RankExit {
    match kinds.last() {
        Some(RankEventKind::Exited(exit)) => exit,
        other => panic!("last event is not Exited: {other:?}"),
    }
}

/// True when `pid` no longer runs: gone, or a zombie nobody reaped yet.
fn is_dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .map(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X'))
            .unwrap_or(false),
    }
}

/// Waits up to 5 s for `pid` to die; panics naming `what` if it lives on.
fn wait_dead(pid: i32, what: &str) {
    eventually_blocking(what, Duration::from_secs(5), || {
        is_dead(pid)
            .then_some(())
            .ok_or(format!("{pid} still runs"))
    })
}

async fn read_pid_file(path: &Path) -> i32 {
    let what = format!("a pid in {}", path.display());
    eventually(&what, WAIT, || async {
        let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
        text.trim().parse().map_err(|e| format!("{text:?}: {e}"))
    })
    .await
}

#[tokio::test]
async fn progress_lines_become_events_and_success_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    // A variable of this process (not PATH, which the spec hands over):
    // the rank must not see it.
    let inherited = std::env::vars()
        .map(|(k, _)| k)
        .find(|k| k != "PATH" && k.chars().all(|c| c == '_' || c.is_ascii_alphanumeric()))
        .expect("the test process has a variable besides PATH");
    let progress = ProgressLine::Checkpoint {
        step: 100,
        path: "/tmp/ckpt".into(),
        best: false,
    };
    let body = format!(
        "echo \"$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT [$CUDA_VISIBLE_DEVICES] $COHORT_JOB_ID\" > env.txt\n\
         echo \"$GROUP_RANK $GROUP_WORLD_SIZE $ROLE_RANK $ROLE_WORLD_SIZE $TORCHELASTIC_RESTART_COUNT $TORCHELASTIC_MAX_RESTARTS $TORCHELASTIC_RUN_ID $COHORT_TRAINING_ID $COHORT_ATTEMPT $COHORT_RUN_DIR\" > torchrun.txt\n\
         echo \"[$(printenv {inherited})]\" > inherited.txt\n\
         echo \"$@\" > args.txt\n\
         echo 'plain log line'\n\
         echo '{}'\n\
         echo 'a warning' >&2\n\
         exit 0",
        progress.to_line(),
        inherited = inherited,
    );
    let program = script(dir.path(), "ok.sh", &body);
    let spec = rank_spec(dir.path(), program, "job-ok", 1);
    let (key, run_dir, config, log) = (
        spec.key.clone(),
        spec.run_dir.clone(),
        spec.run_dir.parent().unwrap().join("config.toml"),
        spec.log_path.clone(),
    );
    let (mut sup, mut rx) = supervisor(Duration::from_secs(5));
    let pid = sup.start(spec).await.unwrap();

    let kinds = events_until_exit(&mut rx, &key).await;
    assert_eq!(kinds[0], RankEventKind::Started { pid });
    assert_eq!(kinds[1], RankEventKind::Progress(progress));
    assert_eq!(kinds.len(), 3, "{kinds:?}");
    let exit = exit_of(&kinds);
    assert_eq!(exit.code, Some(0));
    assert_eq!(exit.signal, None);
    assert_eq!(exit.class, ExitClass::Success);
    assert_eq!(exit.stderr_tail, vec!["a warning".to_string()]);
    assert!(!exit.stop_requested);

    let env = std::fs::read_to_string(run_dir.join("env.txt")).unwrap();
    assert_eq!(env.trim(), "1 2 1 2 127.0.0.1 29500 [] job-ok");
    // The rest of torchrun's environment, and cohort's.
    let torchrun = std::fs::read_to_string(run_dir.join("torchrun.txt")).unwrap();
    assert_eq!(
        torchrun.trim(),
        format!("0 1 1 2 0 0 job-ok job-ok 0 {}", run_dir.display())
    );
    // The rank's log holds its output but the progress line.
    let kept = std::fs::read_to_string(&log).unwrap();
    let mut kept: Vec<&str> = kept.lines().collect();
    kept.sort_unstable();
    assert_eq!(kept, ["a warning", "plain log line"]);
    let inherited_seen = std::fs::read_to_string(run_dir.join("inherited.txt")).unwrap();
    assert_eq!(
        inherited_seen.trim(),
        "[]",
        "{inherited} leaked into the rank"
    );
    let args = std::fs::read_to_string(run_dir.join("args.txt")).unwrap();
    assert_eq!(
        args.trim(),
        format!(
            "--config {} --run-dir {}",
            config.display(),
            run_dir.display()
        )
    );
    assert!(sup.running().is_empty());
    assert_eq!(sup.stop(&key).await.unwrap(), StopOutcome::AlreadyExited);
}

#[tokio::test]
async fn exit_codes_are_classified_and_stderr_tail_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let (mut sup, mut rx) = supervisor(Duration::from_secs(5));

    let bad_config = script(
        dir.path(),
        "bad.sh",
        "echo 'config: unknown key' >&2\nexit 3",
    );
    let spec = rank_spec(dir.path(), bad_config, "job-bad", 0);
    let key = spec.key.clone();
    sup.start(spec).await.unwrap();
    let kinds = events_until_exit(&mut rx, &key).await;
    let exit = exit_of(&kinds);
    assert_eq!(exit.code, Some(3));
    assert_eq!(exit.class, ExitClass::UserError);
    assert_eq!(exit.stderr_tail, vec!["config: unknown key".to_string()]);

    let noisy = script(
        dir.path(),
        "noisy.sh",
        "i=1\nwhile [ $i -le 80 ]; do echo \"line $i\" >&2; i=$((i+1)); done\nexit 13",
    );
    let spec = rank_spec(dir.path(), noisy, "job-noisy", 0);
    let key = spec.key.clone();
    sup.start(spec).await.unwrap();
    let kinds = events_until_exit(&mut rx, &key).await;
    let exit = exit_of(&kinds);
    assert_eq!(exit.class, ExitClass::Infrastructure);
    assert_eq!(exit.stderr_tail.len(), STDERR_TAIL_LINES);
    assert_eq!(exit.stderr_tail.first().unwrap(), "line 31");
    assert_eq!(exit.stderr_tail.last().unwrap(), "line 80");
}

#[tokio::test]
async fn ignored_sigterm_escalates_to_sigkill_of_the_whole_group() {
    let dir = tempfile::tempdir().unwrap();
    // Ignores SIGTERM, and so does the child it forks (SIG_IGN is inherited).
    let stubborn = script(
        dir.path(),
        "stubborn.sh",
        "trap '' TERM\nsleep 1000 &\necho $! > child.pid\nwait",
    );
    let spec = rank_spec(dir.path(), stubborn, "job-stubborn", 0);
    let (key, run_dir) = (spec.key.clone(), spec.run_dir.clone());
    let (mut sup, mut rx) = supervisor(Duration::from_millis(500));
    let pid = sup.start(spec).await.unwrap() as i32;
    let child = read_pid_file(&run_dir.join("child.pid")).await;
    assert!(!is_dead(child));
    assert_eq!(sup.running(), vec![key.clone()]);

    let started = Instant::now();
    assert_eq!(sup.stop(&key).await.unwrap(), StopOutcome::Killed);
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "grace was honoured"
    );
    assert!(is_dead(pid), "the rank was reaped");
    wait_dead(child, "the forked child died with the group");

    let kinds = events_until_exit(&mut rx, &key).await;
    let exit = exit_of(&kinds);
    assert_eq!(exit.code, None);
    assert_eq!(exit.signal, Some(libc::SIGKILL));
    assert_eq!(exit.class, ExitClass::Stopped);
    assert!(exit.stop_requested);
    assert!(sup.running().is_empty());
}

#[tokio::test]
async fn sigterm_stops_a_cooperative_rank_within_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let sleeper = script(
        dir.path(),
        "sleeper.sh",
        "sleep 1000 &\necho $! > child.pid\nwait",
    );
    let spec = rank_spec(dir.path(), sleeper, "job-coop", 0);
    let (key, run_dir) = (spec.key.clone(), spec.run_dir.clone());
    let (mut sup, mut rx) = supervisor(Duration::from_secs(10));
    sup.start(spec).await.unwrap();
    let child = read_pid_file(&run_dir.join("child.pid")).await;

    let started = Instant::now();
    assert_eq!(sup.stop(&key).await.unwrap(), StopOutcome::Terminated);
    assert!(started.elapsed() < Duration::from_secs(5));
    wait_dead(child, "the child to die");
    let kinds = events_until_exit(&mut rx, &key).await;
    let exit = exit_of(&kinds);
    assert_eq!(exit.signal, Some(libc::SIGTERM));
    assert_eq!(exit.class, ExitClass::Stopped);
}

#[tokio::test]
async fn a_rank_that_exits_leaves_no_forked_process_behind() {
    let dir = tempfile::tempdir().unwrap();
    let leaky = script(
        dir.path(),
        "leaky.sh",
        "sleep 1000 &\necho $! > child.pid\nexit 0",
    );
    let spec = rank_spec(dir.path(), leaky, "job-leaky", 0);
    let (key, run_dir) = (spec.key.clone(), spec.run_dir.clone());
    let (mut sup, mut rx) = supervisor(Duration::from_secs(5));
    sup.start(spec).await.unwrap();
    let kinds = events_until_exit(&mut rx, &key).await;
    assert_eq!(exit_of(&kinds).class, ExitClass::Success);
    let child = read_pid_file(&run_dir.join("child.pid")).await;
    wait_dead(child, "the orphaned child was killed with the group");
}

#[tokio::test]
async fn stop_job_stops_only_that_job_and_drop_kills_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let sleeper = script(dir.path(), "sleeper.sh", "exec sleep 1000");
    let (mut sup, mut rx) = supervisor(Duration::from_secs(5));
    let a0 = sup
        .start(rank_spec(dir.path(), sleeper.clone(), "a", 0))
        .await
        .unwrap();
    let a1 = sup
        .start(rank_spec(dir.path(), sleeper.clone(), "a", 1))
        .await
        .unwrap();
    let b0 = sup
        .start(rank_spec(dir.path(), sleeper, "b", 0))
        .await
        .unwrap() as i32;

    let outcomes = sup.stop_job("a").await;
    assert_eq!(outcomes.len(), 2);
    assert!(outcomes.iter().all(|(_, o)| *o == StopOutcome::Terminated));
    assert!(is_dead(a0 as i32) && is_dead(a1 as i32));
    assert_eq!(sup.running(), vec![RankKey::new("b", 0, 0)]);

    drop(sup);
    wait_dead(b0, "dropping the supervisor killed the group");
    // The monitor still reports the end.
    let kinds = events_until_exit(&mut rx, &RankKey::new("b", 0, 0)).await;
    assert_eq!(exit_of(&kinds).signal, Some(libc::SIGKILL));
}

#[tokio::test]
async fn start_errors_are_precise() {
    let dir = tempfile::tempdir().unwrap();
    let (mut sup, _rx) = supervisor(Duration::from_secs(1));
    let missing = rank_spec(dir.path(), dir.path().join("no-such-rank"), "j", 0);
    assert!(matches!(
        sup.start(missing).await,
        Err(SupervisorError::ProgramNotFound(_))
    ));

    let sleeper = script(dir.path(), "sleeper.sh", "exec sleep 1000");
    sup.start(rank_spec(dir.path(), sleeper.clone(), "j", 0))
        .await
        .unwrap();
    let err = sup
        .start(rank_spec(dir.path(), sleeper, "j", 0))
        .await
        .unwrap_err();
    assert!(matches!(err, SupervisorError::AlreadyRunning(_)), "{err}");
    assert!(matches!(
        sup.stop(&RankKey::new("other", 0, 0)).await,
        Err(SupervisorError::NotFound(_))
    ));
    sup.shutdown().await;
    assert!(sup.running().is_empty());
}

/// A program that honours its notice: on SIGTERM it reads its notice file,
/// writes a checkpoint (by rename, as cohort_train does) and exits 0 — the
/// checkpoint is reported before the exit, and the exit is a preemption.
#[tokio::test]
async fn a_noticed_program_checkpoints_in_its_grace_and_it_is_reported_first() {
    use cohort_agent::program::checkpoints::CheckpointWatch;
    use cohort_agent::supervisor::NoticeSpec;
    let dir = tempfile::tempdir().unwrap();
    let body = r#"
on_term() {
  grep -q '^COHORT_PREEMPTED=1$' "$COHORT_NOTICE_FILE" || exit 9
  mkdir -p ckpt/.step-7.tmp && echo state > ckpt/.step-7.tmp/state && mv ckpt/.step-7.tmp ckpt/step-7
  exit 0
}
trap on_term TERM
echo ready > ready
while true; do sleep 0.05; done
"#;
    let program = script(dir.path(), "honours.sh", body);
    let mut spec = rank_spec(dir.path(), program, "job-notice", 0);
    let ckpt = spec.run_dir.join("ckpt");
    std::fs::create_dir_all(&ckpt).unwrap();
    spec.checkpoints = Some(CheckpointWatch {
        dir: ckpt.clone(),
        keep: 3,
        remote: None,
    });
    spec.notice = Some(NoticeSpec {
        file: NoticeSpec::file_in(&spec.run_dir, 0, 0),
        signal: nix::sys::signal::Signal::SIGTERM,
    });
    let (key, run_dir) = (spec.key.clone(), spec.run_dir.clone());
    let (mut sup, mut rx) = supervisor(Duration::from_secs(10));
    sup.start(spec).await.unwrap();
    read_pid_file_text(&run_dir.join("ready")).await;
    let noticed = sup.noticers("job-notice", 0, Duration::from_secs(10));
    assert_eq!(noticed.len(), 1);
    let outcomes = cohort_agent::supervisor::RankStopper::notice_all(noticed).await;
    assert_eq!(outcomes[0].1, StopOutcome::Terminated);
    let file = std::fs::read_to_string(NoticeSpec::file_in(&run_dir, 0, 0)).unwrap();
    assert_eq!(file, "COHORT_PREEMPTED=1\n");
    let kinds = events_until_exit(&mut rx, &key).await;
    let at = kinds
        .iter()
        .position(|k| {
            matches!(
                k,
                RankEventKind::Progress(ProgressLine::Checkpoint { step: 7, .. })
            )
        })
        .expect("the checkpoint of the grace is reported");
    assert_eq!(at, kinds.len() - 2, "right before the exit: {kinds:?}");
    let exit = exit_of(&kinds);
    assert_eq!(exit.code, Some(0), "{exit:?}");
    assert!(exit.noticed);
    // A second notice of the same attempt changes nothing.
    let again = cohort_agent::supervisor::RankStopper::notice_all(sup.noticers(
        "job-notice",
        0,
        Duration::from_secs(1),
    ))
    .await;
    assert!(
        again
            .iter()
            .all(|(_, o)| matches!(o, StopOutcome::AlreadyExited | StopOutcome::Noticed)),
        "{again:?}"
    );
}

/// A program that ignores its notice is killed at the end of its grace; the
/// exit is still the notice's (class Preempted), not a failure.
#[tokio::test]
async fn a_program_that_ignores_its_notice_is_killed_at_the_grace() {
    use cohort_agent::supervisor::NoticeSpec;
    let dir = tempfile::tempdir().unwrap();
    let program = script(
        dir.path(),
        "deaf.sh",
        "trap '' TERM\necho ready > ready\nwhile true; do sleep 0.05; done",
    );
    let mut spec = rank_spec(dir.path(), program, "job-deaf", 0);
    spec.notice = Some(NoticeSpec {
        file: NoticeSpec::file_in(&spec.run_dir, 0, 0),
        signal: nix::sys::signal::Signal::SIGTERM,
    });
    let (key, run_dir) = (spec.key.clone(), spec.run_dir.clone());
    let (mut sup, mut rx) = supervisor(Duration::from_secs(10));
    sup.start(spec).await.unwrap();
    read_pid_file_text(&run_dir.join("ready")).await;
    let started = Instant::now();
    let outcomes = cohort_agent::supervisor::RankStopper::notice_all(sup.noticers(
        "job-deaf",
        0,
        Duration::from_millis(600),
    ))
    .await;
    assert_eq!(outcomes[0].1, StopOutcome::Killed);
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "the grace was given"
    );
    let kinds = events_until_exit(&mut rx, &key).await;
    let exit = exit_of(&kinds);
    assert_eq!(exit.signal, Some(libc::SIGKILL));
    assert_eq!(exit.class, ExitClass::Preempted);
    assert!(exit.noticed && exit.stop_requested);
}

async fn read_pid_file_text(path: &Path) -> String {
    let what = format!("{} to be written", path.display());
    eventually(&what, WAIT, || async {
        match std::fs::read_to_string(path) {
            Ok(text) if !text.is_empty() => Ok(text),
            Ok(_) => Err("empty".to_string()),
            Err(e) => Err(e.to_string()),
        }
    })
    .await
}
