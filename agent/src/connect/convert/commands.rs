//! The coordinator's commands about ranks -> the agent's domain types,
//! checked once on receive: a command that could name a path outside the
//! work dir, a rank outside its world or a GPU this agent lacks never gets
//! past here.

use std::path::{Component, Path, PathBuf};

use cohort_proto::error::Reason;
use cohort_proto::v1;
use cohort_spec::resume::Published;
use cohort_spec::Workload;

use super::positive_duration;
use crate::launch::{NoticeRanks, RankAssignment, Refusal, StartRanks, StopRanks};
use crate::supervisor::RankKey;

/// A StartRanks refused before anything is written or started: each rank
/// it named (as well as it named them) is reported with the refusal.
#[derive(Debug, Clone)]
pub struct Rejected {
    pub keys: Vec<RankKey>,
    pub refusal: Refusal,
}

/// Checks and converts a StartRanks for an agent with `gpu_count` GPUs.
pub fn start_ranks(mut cmd: v1::StartRanks, gpu_count: usize) -> Result<StartRanks, Rejected> {
    let config = cmd.config.take();
    let reject = |refusal: Refusal| Rejected {
        keys: named_keys(&cmd),
        refusal,
    };
    check(&cmd, gpu_count).map_err(|m| reject(Refusal::failed(m)))?;
    let config = config.ok_or_else(|| reject(Refusal::failed("the command carries no config")))?;
    // Checked by the coordinator when the training was created: a config
    // this agent cannot read is the training's, on every host.
    let workload = Workload::try_from(config).map_err(|e| {
        reject(Refusal::refused(
            Reason::InvalidConfig,
            format!("the config is invalid here: {e}"),
        ))
    })?;
    let run_dir = match cmd.run_dir.as_str() {
        "" => None,
        dir => Some(relative_path(dir).map_err(|m| reject(Refusal::failed(m)))?),
    };
    Ok(StartRanks {
        attempt: cmd.attempt as u32,
        workload,
        world_size: cmd.world_size as u32,
        world_sizes: world_sizes(&cmd),
        master_port: cmd.master_port as u16,
        ranks: cmd
            .ranks
            .iter()
            .map(|r| RankAssignment {
                rank: r.rank as u32,
                local_rank: r.local_rank as u32,
                local_world_size: r.local_world_size as u32,
                gpu_index: r.gpu_index as u32,
            })
            .collect(),
        run_dir,
        published: Published::new(
            cmd.published_checkpoints
                .iter()
                .map(|c| (i64::from(c.attempt), c.step)),
        ),
        group_rank: cmd.group_rank.max(0) as u32,
        // A coordinator that does not say: this agent alone.
        group_world_size: cmd.group_world_size.max(1) as u32,
        max_restarts: cmd.max_restarts.max(0) as u32,
        host_memory_limit: (cmd.host_memory_limit_bytes > 0).then_some(cmd.host_memory_limit_bytes),
        training_id: cmd.training_id,
        master_addr: cmd.master_addr,
        trace_context: cmd.trace_context,
        team: cmd.team,
    })
}

/// The sizes the training may be re-formed at; a coordinator that does
/// not say (or says something outside sense): the world size it runs at.
fn world_sizes(cmd: &v1::StartRanks) -> (u32, u32) {
    let world = cmd.world_size.max(1) as u32;
    let (min, max) = (cmd.min_world_size, cmd.max_world_size);
    if min < 1 || max < min || !(min..=max).contains(&cmd.world_size) {
        return (world, world);
    }
    (min as u32, max as u32)
}

/// The ranks a command names, for reporting a refusal of all of them.
fn named_keys(cmd: &v1::StartRanks) -> Vec<RankKey> {
    let attempt = u32::try_from(cmd.attempt).unwrap_or(0);
    cmd.ranks
        .iter()
        .map(|r| {
            RankKey::new(
                &cmd.training_id,
                attempt,
                u32::try_from(r.rank).unwrap_or(0),
            )
        })
        .collect()
}

/// What every field must be before the command is converted.
fn check(cmd: &v1::StartRanks, gpu_count: usize) -> Result<(), String> {
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
    for r in &cmd.ranks {
        check_rank(r, cmd.world_size, gpu_count)?;
    }
    Ok(())
}

fn check_rank(
    r: &v1::LocalRankAssignment,
    world_size: i32,
    gpu_count: usize,
) -> Result<(), String> {
    if r.rank < 0 || r.rank >= world_size {
        return Err(format!(
            "rank {} is outside world size {world_size}",
            r.rank
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
    Ok(())
}

/// A run directory under the work dir: relative, without `..`.
fn relative_path(dir: &str) -> Result<PathBuf, String> {
    let path = Path::new(dir);
    let inside = path
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if inside {
        Ok(path.to_path_buf())
    } else {
        Err(format!("run_dir {dir:?} is not a path under the work dir"))
    }
}

/// A StopRanks: attempt 0 stops every attempt; a negative one is refused.
pub fn stop_ranks(cmd: v1::StopRanks) -> Result<StopRanks, String> {
    let attempt = match cmd.attempt {
        0 => None,
        a => Some(u32::try_from(a).map_err(|_| format!("attempt {a} is negative"))?),
    };
    Ok(StopRanks {
        grace: positive_duration(cmd.grace_period.as_ref()),
        training_id: cmd.training_id,
        attempt,
        reason: cmd.reason,
    })
}

/// A NoticeRanks; a negative attempt is refused.
pub fn notice_ranks(cmd: v1::NoticeRanks) -> Result<NoticeRanks, String> {
    let attempt =
        u32::try_from(cmd.attempt).map_err(|_| format!("attempt {} is negative", cmd.attempt))?;
    Ok(NoticeRanks {
        grace: positive_duration(cmd.grace_period.as_ref()),
        training_id: cmd.training_id,
        attempt,
        reason: cmd.reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command() -> v1::StartRanks {
        let config = Workload::from_toml(
            "[model]\nd_in = 4\n[optim]\nbatch_size = 8\nsteps = 1\n[data.synthetic]\nnum_samples = 4\n",
        )
        .unwrap();
        v1::StartRanks {
            training_id: "t-1".into(),
            attempt: 1,
            config: Some(v1::TrainingConfig::from(&config)),
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
            ..Default::default()
        }
    }

    #[test]
    fn a_sound_command_becomes_its_domain_type() {
        let start = start_ranks(command(), 2).unwrap();
        assert_eq!(
            (start.attempt, start.world_size, start.master_port),
            (1, 2, 29500)
        );
        assert_eq!(start.keys(), vec![RankKey::new("t-1", 1, 1)]);
        assert_eq!(start.workload.sae().unwrap().model.d_in, 4);
        assert_eq!((start.group_rank, start.group_world_size), (0, 1));
        assert_eq!(start.run_dir, None);
        assert_eq!(start.host_memory_limit, None);
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
            ("no config", Box::new(|c| c.config = None)),
            ("outside world size", Box::new(|c| c.ranks[0].rank = 2)),
            ("local world size", Box::new(|c| c.ranks[0].local_rank = 1)),
            ("does not exist", Box::new(|c| c.ranks[0].gpu_index = 2)),
            (
                "under the work dir",
                Box::new(|c| c.run_dir = "../up".into()),
            ),
            (
                "under the work dir",
                Box::new(|c| c.run_dir = "/etc".into()),
            ),
        ];
        for (expected, mutate) in cases {
            let mut c = command();
            mutate(&mut c);
            let rejected = start_ranks(c, 2).unwrap_err();
            assert!(
                rejected.refusal.message.contains(expected),
                "{:?} should mention {expected:?}",
                rejected.refusal.message
            );
            assert_eq!(rejected.refusal.reason, None, "the host's refusal");
        }
    }

    #[test]
    fn a_config_the_agent_cannot_read_is_the_trainings_fault() {
        let mut c = command();
        c.config
            .as_mut()
            .unwrap()
            .optim
            .as_mut()
            .unwrap()
            .batch_size = 0;
        let rejected = start_ranks(c, 2).unwrap_err();
        assert_eq!(rejected.refusal.reason, Some(Reason::InvalidConfig));
        assert_eq!(rejected.keys, vec![RankKey::new("t-1", 1, 1)]);
    }

    #[test]
    fn stop_and_notice_refuse_negative_attempts() {
        let stop = |attempt| v1::StopRanks {
            training_id: "t".into(),
            attempt,
            ..Default::default()
        };
        assert_eq!(stop_ranks(stop(0)).unwrap().attempt, None);
        assert_eq!(stop_ranks(stop(3)).unwrap().attempt, Some(3));
        assert!(stop_ranks(stop(-1)).is_err());
        let notice = v1::NoticeRanks {
            training_id: "t".into(),
            attempt: -2,
            ..Default::default()
        };
        assert!(notice_ranks(notice).is_err());
    }
}
