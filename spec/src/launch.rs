//! The launch contract: the environment every rank starts with, whatever
//! program it runs. It is torchrun's, so an unmodified
//! `init_process_group(init_method="env://")` script finds its peers, plus
//! what cohort adds (which training and attempt, where its run dir is). The
//! agent builds it here ([`Launch::env`]); `cohort-rank` reads its part back.

/// torchrun's variables, in the order they are set.
pub const TORCHRUN: [&str; 13] = [
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
];

/// The training's id.
pub const TRAINING_ID: &str = "COHORT_TRAINING_ID";
/// The training's id under its first name (kept: `cohort-rank` run by hand
/// and older scripts read it).
pub const JOB_ID: &str = "COHORT_JOB_ID";
/// The attempt, from 1.
pub const ATTEMPT: &str = "COHORT_ATTEMPT";
/// The run directory (also the working directory).
pub const RUN_DIR: &str = "COHORT_RUN_DIR";
/// Where rank 0 writes its `step-<N>/` checkpoint directories.
pub const CHECKPOINT_DIR: &str = "COHORT_CHECKPOINT_DIR";
/// The newest complete checkpoint to resume from (absent on a fresh
/// start): its directory (a Hugging Face checkpoint's own `checkpoint-<N>`).
pub const RESUME_DIR: &str = "COHORT_RESUME_DIR";
/// The same checkpoint itself: a Lightning checkpoint's `.ckpt` file, the
/// directory otherwise (absent on a fresh start).
pub const RESUME_PATH: &str = "COHORT_RESUME_PATH";
/// A file the agent writes `COHORT_PREEMPTED=1` into when the rank gets a
/// preemption notice (before SIGTERM); absent until then.
pub const NOTICE_FILE: &str = "COHORT_NOTICE_FILE";
/// The line of the notice file that says the rank is being preempted.
pub const PREEMPTED_LINE: &str = "COHORT_PREEMPTED=1";
/// The smallest world size the training may be re-formed at (an elastic
/// training's range; WORLD_SIZE for one that is never resized).
pub const MIN_WORLD_SIZE: &str = "COHORT_MIN_WORLD_SIZE";
/// The largest world size the training may be re-formed at.
pub const MAX_WORLD_SIZE: &str = "COHORT_MAX_WORLD_SIZE";
/// The global batch a program holds at every size (`[program]
/// global_batch`); absent when the config gives none.
pub const GLOBAL_BATCH: &str = "COHORT_GLOBAL_BATCH";
/// The GPU the rank may use (empty: none, the rank runs on the CPU).
pub const CUDA_VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";

/// Where one rank stands in its gang.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub training_id: String,
    /// From 1.
    pub attempt: u32,
    pub rank: u32,
    pub world_size: u32,
    /// The sizes the training may be re-formed at, smallest and largest.
    pub world_sizes: (u32, u32),
    pub local_rank: u32,
    pub local_world_size: u32,
    /// The rank's host among the gang's hosts (ordered by their first rank).
    pub group_rank: u32,
    /// How many hosts the gang spans.
    pub group_world_size: u32,
    pub master_addr: String,
    pub master_port: u16,
    /// Restarts the training may still use in all (its budget).
    pub max_restarts: u32,
    pub run_dir: String,
    pub cuda_visible_devices: String,
}

impl Launch {
    /// The variables, torchrun's first. Every rank of a gang plays one
    /// role, so ROLE_RANK and ROLE_WORLD_SIZE equal RANK and WORLD_SIZE;
    /// the restart count is the attempt's (a first attempt is restart 0).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let values = [
            self.rank.to_string(),
            self.local_rank.to_string(),
            self.world_size.to_string(),
            self.local_world_size.to_string(),
            self.group_rank.to_string(),
            self.group_world_size.to_string(),
            self.rank.to_string(),
            self.world_size.to_string(),
            self.master_addr.clone(),
            self.master_port.to_string(),
            self.attempt.saturating_sub(1).to_string(),
            self.max_restarts.to_string(),
            self.training_id.clone(),
        ];
        let mut env: Vec<(&'static str, String)> = TORCHRUN.into_iter().zip(values).collect();
        env.extend([
            (CUDA_VISIBLE_DEVICES, self.cuda_visible_devices.clone()),
            (TRAINING_ID, self.training_id.clone()),
            (JOB_ID, self.training_id.clone()),
            (ATTEMPT, self.attempt.to_string()),
            (RUN_DIR, self.run_dir.clone()),
            (MIN_WORLD_SIZE, self.world_sizes.0.to_string()),
            (MAX_WORLD_SIZE, self.world_sizes.1.to_string()),
        ]);
        env
    }

    /// Whether `name` is one of the contract's variables (which a
    /// training's own variables may not replace).
    pub fn sets(name: &str) -> bool {
        TORCHRUN.contains(&name)
            || [
                CUDA_VISIBLE_DEVICES,
                TRAINING_ID,
                JOB_ID,
                ATTEMPT,
                RUN_DIR,
                CHECKPOINT_DIR,
                RESUME_DIR,
                RESUME_PATH,
                NOTICE_FILE,
                MIN_WORLD_SIZE,
                MAX_WORLD_SIZE,
                GLOBAL_BATCH,
            ]
            .contains(&name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variable_torchrun_sets_and_ours() {
        let launch = Launch {
            training_id: "trn-1".into(),
            attempt: 3,
            rank: 5,
            world_size: 8,
            world_sizes: (4, 8),
            local_rank: 1,
            local_world_size: 4,
            group_rank: 1,
            group_world_size: 2,
            master_addr: "10.0.0.1".into(),
            master_port: 29500,
            max_restarts: 3,
            run_dir: "/w/trainings/trn-1/run".into(),
            cuda_visible_devices: "1".into(),
        };
        let env: std::collections::HashMap<_, _> = launch.env().into_iter().collect();
        let expect = [
            ("RANK", "5"),
            ("LOCAL_RANK", "1"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_WORLD_SIZE", "4"),
            ("GROUP_RANK", "1"),
            ("GROUP_WORLD_SIZE", "2"),
            ("ROLE_RANK", "5"),
            ("ROLE_WORLD_SIZE", "8"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "29500"),
            ("TORCHELASTIC_RESTART_COUNT", "2"),
            ("TORCHELASTIC_MAX_RESTARTS", "3"),
            ("TORCHELASTIC_RUN_ID", "trn-1"),
            ("CUDA_VISIBLE_DEVICES", "1"),
            ("COHORT_TRAINING_ID", "trn-1"),
            ("COHORT_JOB_ID", "trn-1"),
            ("COHORT_ATTEMPT", "3"),
            ("COHORT_RUN_DIR", "/w/trainings/trn-1/run"),
            ("COHORT_MIN_WORLD_SIZE", "4"),
            ("COHORT_MAX_WORLD_SIZE", "8"),
        ];
        assert_eq!(env.len(), expect.len());
        for (k, v) in expect {
            assert_eq!(env.get(k).map(String::as_str), Some(v), "{k}");
            assert!(Launch::sets(k), "{k}");
        }
        assert!(!Launch::sets("HF_HOME"));
    }
}
