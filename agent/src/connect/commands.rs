//! The coordinator's commands: StartRanks, StopRanks and NoticeRanks.

use crate::supervisor::log::log_path;
use std::path::PathBuf;
use tracing::Instrument as _;

use cohort_observe::propagation;
use cohort_proto::error::Reason;
use cohort_proto::v1;
use cohort_proto::v1::coordinator_message::Message as In;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::{convert, Agent};
use crate::supervisor::{RankKey, RankSpec, RankStopper};
use cohort_spec::prefixes::S3Prefixes;
use cohort_spec::roots::{self, DataRoots};

/// Runs one command. Returns events to send at once (ranks that could not be
/// started); everything else is reported through the supervisor's events.
pub(super) async fn handle(
    agent: &mut Agent,
    command: v1::CoordinatorMessage,
) -> Vec<v1::RankEvent> {
    match command.message {
        Some(In::StartRanks(start)) => start_ranks(agent, start).await,
        Some(In::StopRanks(stop)) => {
            stop_ranks(agent, stop);
            Vec::new()
        }
        Some(In::NoticeRanks(notice)) => {
            notice_ranks(agent, notice);
            Vec::new()
        }
        // The session serves these itself, before commands reach here.
        Some(In::ReadFile(_))
        | Some(In::Ack(_))
        | Some(In::Members(_))
        | Some(In::RunDoctor(_)) => Vec::new(),
        Some(In::Registered(_)) => {
            tracing::warn!("ignoring a second Registered on the same session");
            Vec::new()
        }
        None => {
            tracing::warn!("ignoring an empty coordinator message");
            Vec::new()
        }
    }
}

async fn start_ranks(agent: &mut Agent, cmd: v1::StartRanks) -> Vec<v1::RankEvent> {
    // A child of the coordinator's `training.start` span, when it sent one.
    let parent = propagation::extract(&cmd.trace_context);
    let span = tracing::info_span!(
        "agent.start_ranks",
        training.id = %cmd.training_id,
        training.attempt = cmd.attempt,
        ranks = cmd.ranks.len(),
        trace_id = propagation::trace_id(&parent).unwrap_or_default(),
    );
    let _ = span.set_parent(parent);
    // Each rank continues the trace from here (W3C `TRACEPARENT`).
    let rank_env: Vec<(String, String)> = propagation::traceparent(&span.context())
        .or_else(|| cmd.trace_context.get(propagation::TRACEPARENT).cloned())
        .map(|tp| vec![(propagation::TRACEPARENT_ENV.to_string(), tp)])
        .unwrap_or_default();
    let attempt = u32::try_from(cmd.attempt).unwrap_or(0);
    let keys: Vec<RankKey> = cmd
        .ranks
        .iter()
        .map(|r| {
            RankKey::new(
                &cmd.training_id,
                attempt,
                u32::try_from(r.rank).unwrap_or(0),
            )
        })
        .collect();
    tracing::info!(
        training = %cmd.training_id,
        attempt = cmd.attempt,
        ranks = cmd.ranks.len(),
        world_size = cmd.world_size,
        master = %format!("{}:{}", cmd.master_addr, cmd.master_port),
        "start ranks"
    );
    let fail_all = |message: String| {
        tracing::warn!(training = %cmd.training_id, error = %message, "cannot start ranks");
        keys.iter()
            .map(|k| convert::start_failed(k, message.clone()))
            .collect::<Vec<_>>()
    };
    if let Err(message) = validate(&cmd, agent.gpus.len()) {
        return fail_all(message);
    }
    let prepared = prepare_dirs(agent, &cmd, attempt)
        .instrument(span.clone())
        .await;
    // The span is never entered across an await (the task may resume on
    // another thread, leaving it entered there): the awaits are
    // instrumented instead.
    let (config_path, run_dir) = match prepared {
        Ok(paths) => paths,
        Err(message) => return fail_all(message),
    };
    // What this training's team may reach here: its roots (with its run
    // dir) and object-storage prefixes.
    let roots = match agent.config.teams.roots(&cmd.team, &run_dir) {
        Ok(roots) => roots,
        Err(message) => return fail_all(message),
    };
    let prefixes = agent.config.teams.s3_prefixes(&cmd.team);
    // Read once. A config the agent cannot read is the rank's to report.
    let workload = cohort_spec::Workload::from_json(&cmd.config_json).ok();
    let sae = workload.as_ref().and_then(cohort_spec::Workload::sae);
    // Refused before any rank starts: a local path outside the team's
    // roots, or an object outside its prefixes.
    let checked = check_roots(&roots, sae, &run_dir).and_then(|()| check_prefixes(&prefixes, sae));
    if let Err(message) = checked {
        tracing::warn!(training = %cmd.training_id, error = %message, "training refused: data outside the roots");
        return keys
            .iter()
            .map(|k| convert::start_refused(k, Reason::DataOutsideRoots, message.clone()))
            .collect();
    }
    let mut rank_env = rank_env;
    // The checkpoints earlier attempts published: the only ones to resume from.
    let published = cohort_spec::resume::Published::new(
        cmd.published_checkpoints
            .iter()
            .map(|c| (i64::from(c.attempt), c.step)),
    );
    rank_env.push((
        cohort_spec::resume::PUBLISHED_ENV.to_string(),
        published.to_env(),
    ));
    if !roots.is_empty() {
        rank_env.push((roots::ENV.to_string(), roots.to_env()));
    }
    if let Some(value) = prefixes.to_env() {
        rank_env.push((cohort_spec::prefixes::ENV.to_string(), value));
    }
    // What runs, where, with which environment: the SAE's or a program's.
    let plan = super::launch::plan(
        agent,
        workload,
        &prefixes,
        &cmd.team,
        &cmd.training_id,
        attempt,
        &config_path,
        &run_dir,
        &roots,
        &published,
    )
    .instrument(span.clone())
    .await;
    let plan = match plan {
        Ok(plan) => plan,
        Err(refusal) => {
            tracing::warn!(training = %cmd.training_id, error = %refusal.message, "training refused");
            return keys
                .iter()
                .map(|k| match refusal.reason {
                    Some(why) => convert::start_refused(k, why, refusal.message.clone()),
                    None => convert::start_failed(k, refusal.message.clone()),
                })
                .collect();
        }
    };

    if log_path(&agent.config.work_dir, &cmd.training_id, attempt, 0, false).is_none() {
        return fail_all(format!(
            "training id {:?} cannot name a directory",
            cmd.training_id
        ));
    }
    let mut failures = Vec::new();
    for (assignment, key) in cmd.ranks.iter().zip(keys) {
        if let Some(pid) = agent.supervisor.pid(&key) {
            // A repeated command (e.g. re-sent after a reconnect): already done.
            tracing::info!(rank = %key, pid, "rank already running; start ignored");
            continue;
        }
        let gpu_index = assignment.gpu_index as u32;
        let simulated = agent.gpus[gpu_index as usize].simulated;
        // Checked below the attempt's directory before the loop.
        let log_path = log_path(
            &agent.config.work_dir,
            &cmd.training_id,
            attempt,
            key.rank,
            false,
        )
        .unwrap_or_default();
        let mut spec = RankSpec {
            key: key.clone(),
            program: PathBuf::new(),
            args: Vec::new(),
            working_dir: PathBuf::new(),
            checkpoints: None,
            sandbox: None,
            log_path,
            run_dir: run_dir.clone(),
            world_size: cmd.world_size as u32,
            local_rank: assignment.local_rank as u32,
            local_world_size: assignment.local_world_size as u32,
            group_rank: cmd.group_rank.max(0) as u32,
            // A coordinator that does not say: this agent alone.
            group_world_size: cmd.group_world_size.max(1) as u32,
            max_restarts: cmd.max_restarts.max(0) as u32,
            master_addr: cmd.master_addr.clone(),
            master_port: cmd.master_port as u16,
            gpu_index,
            // A simulated GPU has no device: the rank runs on the CPU.
            cuda_visible_devices: if simulated {
                String::new()
            } else {
                gpu_index.to_string()
            },
            extra_env: rank_env.clone(),
            base_env: Vec::new(),
            memory_limit: (cmd.host_memory_limit_bytes > 0).then_some(cmd.host_memory_limit_bytes),
            notice: None,
        };
        plan.apply(&mut spec);
        if let Err(e) = agent.supervisor.start(spec).instrument(span.clone()).await {
            tracing::warn!(rank = %key, error = %e, "rank did not start");
            failures.push(convert::start_failed(&key, e.to_string()));
        }
    }
    failures
}

/// Whether the config's local paths (relative ones against the run
/// directory, the ranks' working directory) lie under the data roots.
/// (A program's checkpoint storage is checked by its launch plan.)
fn check_roots(
    roots: &DataRoots,
    sae: Option<&cohort_spec::TrainingConfig>,
    run_dir: &std::path::Path,
) -> Result<(), String> {
    match sae {
        Some(config) if !roots.is_empty() => roots.check_config(config, run_dir),
        _ => Ok(()),
    }
}

/// Whether the config's `s3://` locations lie under the team's prefixes.
fn check_prefixes(
    prefixes: &S3Prefixes,
    sae: Option<&cohort_spec::TrainingConfig>,
) -> Result<(), String> {
    match sae {
        Some(config) if !prefixes.is_open() => prefixes.check_config(config),
        _ => Ok(()),
    }
}

/// Checks a StartRanks before anything is written or started.
pub(super) fn validate(cmd: &v1::StartRanks, gpu_count: usize) -> Result<(), String> {
    let id = &cmd.training_id;
    let safe_id = !id.is_empty()
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !safe_id {
        return Err(format!("training id {id:?} is not a safe name"));
    }
    if cmd.attempt < 0 {
        return Err(format!("attempt {} is negative", cmd.attempt));
    }
    if cmd.ranks.is_empty() {
        return Err("no ranks to start".into());
    }
    if cmd.world_size < 1 {
        return Err(format!("world size {} is below 1", cmd.world_size));
    }
    if cmd.master_addr.is_empty() {
        return Err("master_addr is empty".into());
    }
    if cmd.master_port == 0 || cmd.master_port > u32::from(u16::MAX) {
        return Err(format!("master_port {} is not a port", cmd.master_port));
    }
    if cmd.config_json.trim().is_empty() {
        return Err("config_json is empty".into());
    }
    for r in &cmd.ranks {
        if r.rank < 0 || r.rank >= cmd.world_size {
            return Err(format!(
                "rank {} is outside world size {}",
                r.rank, cmd.world_size
            ));
        }
        if r.local_rank < 0 || r.local_rank >= r.local_world_size {
            return Err(format!(
                "local rank {} is outside local world size {}",
                r.local_rank, r.local_world_size
            ));
        }
        if r.gpu_index < 0 || r.gpu_index as usize >= gpu_count {
            return Err(format!(
                "gpu {} does not exist on this agent ({gpu_count} gpus)",
                r.gpu_index
            ));
        }
    }
    Ok(())
}

/// Writes the config to `<work>/trainings/<id>/attempt-<n>/config.json` and
/// creates the run directory (the command's, relative to the work dir, or
/// `<work>/trainings/<id>/run`), without blocking the session.
async fn prepare_dirs(
    agent: &Agent,
    cmd: &v1::StartRanks,
    attempt: u32,
) -> Result<(PathBuf, PathBuf), String> {
    let training_dir = agent
        .config
        .work_dir
        .join("trainings")
        .join(&cmd.training_id);
    let attempt_dir = training_dir.join(format!("attempt-{attempt}"));
    tokio::fs::create_dir_all(&attempt_dir)
        .await
        .map_err(|e| format!("cannot create {}: {e}", attempt_dir.display()))?;
    let config_path = attempt_dir.join("config.json");
    tokio::fs::write(&config_path, &cmd.config_json)
        .await
        .map_err(|e| format!("cannot write {}: {e}", config_path.display()))?;
    let run_dir = if cmd.run_dir.is_empty() {
        training_dir.join("run")
    } else {
        agent.config.work_dir.join(&cmd.run_dir)
    };
    tokio::fs::create_dir_all(&run_dir)
        .await
        .map_err(|e| format!("cannot create {}: {e}", run_dir.display()))?;
    // The rank runs with the run dir as its working directory: make both
    // paths absolute so they mean the same inside it.
    Ok((absolute(config_path), absolute(run_dir)))
}

fn absolute(path: PathBuf) -> PathBuf {
    std::path::absolute(&path).unwrap_or(path)
}

/// Stops in a spawned task so the session keeps serving during the grace period.
fn stop_ranks(agent: &Agent, cmd: v1::StopRanks) {
    let attempt = match cmd.attempt {
        0 => None,
        a if a > 0 => Some(a as u32),
        a => {
            tracing::warn!(training = %cmd.training_id, attempt = a, "ignoring StopRanks with a negative attempt");
            return;
        }
    };
    let grace =
        convert::positive_duration(cmd.grace_period.as_ref()).unwrap_or(agent.config.stop_grace);
    let stoppers = agent.supervisor.stoppers(&cmd.training_id, attempt, grace);
    tracing::info!(
        training = %cmd.training_id,
        attempt = cmd.attempt,
        ranks = stoppers.len(),
        grace_ms = grace.as_millis() as u64,
        reason = %cmd.reason,
        "stop ranks"
    );
    if stoppers.is_empty() {
        return;
    }
    tokio::spawn(async move {
        for (key, outcome) in RankStopper::stop_all(stoppers).await {
            tracing::info!(rank = %key, outcome = ?outcome, "rank stopped");
        }
    });
}

/// Gives notice in a spawned task so the session keeps serving during the
/// grace period; a rank noticed already is left alone.
fn notice_ranks(agent: &Agent, cmd: v1::NoticeRanks) {
    let Ok(attempt) = u32::try_from(cmd.attempt) else {
        tracing::warn!(training = %cmd.training_id, attempt = cmd.attempt, "ignoring NoticeRanks with a negative attempt");
        return;
    };
    let grace =
        convert::positive_duration(cmd.grace_period.as_ref()).unwrap_or(agent.config.stop_grace);
    let noticed = agent.supervisor.noticers(&cmd.training_id, attempt, grace);
    tracing::info!(
        training = %cmd.training_id,
        attempt,
        ranks = noticed.len(),
        grace_ms = grace.as_millis() as u64,
        reason = %cmd.reason,
        "preemption notice"
    );
    if noticed.is_empty() {
        return;
    }
    tokio::spawn(async move {
        for (key, outcome) in RankStopper::notice_all(noticed).await {
            tracing::info!(rank = %key, outcome = ?outcome, "rank noticed");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command() -> v1::StartRanks {
        v1::StartRanks {
            training_id: "t-1".into(),
            attempt: 1,
            config_json: "{}".into(),
            world_size: 2,
            master_addr: "127.0.0.1".into(),
            master_port: 29500,
            ranks: vec![v1::LocalRankAssignment {
                rank: 1,
                local_rank: 0,
                local_world_size: 1,
                gpu_index: 1,
                gpu_uuid: "GPU-SIM-a-1".into(),
            }],
            run_dir: String::new(),
            trace_context: Default::default(),
            published_checkpoints: vec![],
            team: String::new(),
            ..Default::default()
        }
    }

    #[test]
    fn a_sound_command_passes() {
        assert_eq!(validate(&command(), 2), Ok(()));
    }

    #[test]
    fn unsafe_or_inconsistent_commands_are_refused() {
        type Mutation = Box<dyn Fn(&mut v1::StartRanks)>;
        let cases: Vec<(&str, Mutation)> = vec![
            ("safe name", Box::new(|c| c.training_id = "../etc".into())),
            ("safe name", Box::new(|c| c.training_id = String::new())),
            ("safe name", Box::new(|c| c.training_id = ".hidden".into())),
            ("negative", Box::new(|c| c.attempt = -1)),
            ("no ranks", Box::new(|c| c.ranks.clear())),
            ("not a port", Box::new(|c| c.master_port = 70_000)),
            ("master_addr", Box::new(|c| c.master_addr.clear())),
            ("config_json", Box::new(|c| c.config_json = " ".into())),
            ("outside world size", Box::new(|c| c.ranks[0].rank = 2)),
            ("local world size", Box::new(|c| c.ranks[0].local_rank = 1)),
            ("does not exist", Box::new(|c| c.ranks[0].gpu_index = 2)),
        ];
        for (expected, mutate) in cases {
            let mut c = command();
            mutate(&mut c);
            let err = validate(&c, 2).unwrap_err();
            assert!(
                err.contains(expected),
                "{err:?} should mention {expected:?}"
            );
        }
    }
}
