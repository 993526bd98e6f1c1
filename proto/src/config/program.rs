//! The workload: `cohort.v1.TrainingConfig` with `program` set is a
//! [`ProgramTraining`], without it the SAE ([`TrainingConfig`]).

use super::runtime::program_runtime_table;
use super::{checkpoint_table, invalid};
use crate::v1;
use cohort_spec::code::{CodeSnapshot, CodeSource};
use cohort_spec::program::{ProgramCheckpoint, ProgramConfig};
use cohort_spec::{ConfigError, ProgramTraining, TrainingConfig, Workload};
use serde_json::{json, Map, Value};

impl TryFrom<v1::TrainingConfig> for Workload {
    type Error = ConfigError;

    fn try_from(p: v1::TrainingConfig) -> Result<Self, ConfigError> {
        let Some(program) = p.program.clone() else {
            return TrainingConfig::try_from(p).map(Workload::Sae);
        };
        for (field, set) in [
            ("model", p.model.is_some()),
            ("optim", p.optim.is_some()),
            ("data", p.data.is_some()),
            ("validation", p.validation.is_some()),
            (
                "checkpoint.every_steps",
                p.checkpoint
                    .as_ref()
                    .is_some_and(|c| c.every_steps.is_some()),
            ),
        ] {
            if set {
                return Err(invalid(
                    field,
                    "not with program: a program training has only program and checkpoint",
                ));
            }
        }
        let mut table = Map::new();
        table.insert("command".into(), json!(program.command));
        table.insert("working_dir".into(), json!(program.working_dir));
        if !program.memory_gib_per_rank.is_finite() {
            return Err(invalid(
                "program.memory_gib_per_rank",
                "must be a finite number",
            ));
        }
        table.insert(
            "memory_gib_per_rank".into(),
            json!(program.memory_gib_per_rank),
        );
        if let Some(h) = program.heartbeat_timeout {
            table.insert("heartbeat_timeout".into(), json!(h));
        }
        if !program.env.is_empty() {
            table.insert("env".into(), json!(program.env));
        }
        if program.elastic {
            table.insert("elastic".into(), json!(true));
        }
        if let Some(g) = program.global_batch {
            table.insert("global_batch".into(), json!(g));
        }
        if let Some(code) = program.code {
            table.insert("code".into(), code_table(code));
        }
        let mut root = Map::new();
        root.insert("program".into(), Value::Object(table));
        if let Some(c) = p.checkpoint {
            root.insert("checkpoint".into(), checkpoint_table(c));
        }
        if let Some(r) = p.runtime {
            let table = program_runtime_table(r)?;
            if table.as_object().is_some_and(|t| !t.is_empty()) {
                root.insert("runtime".into(), table);
            }
        }
        if let Some(t) = super::tracking_table(p.tracking) {
            root.insert("tracking".into(), t);
        }
        let training: ProgramTraining =
            serde_json::from_value(Value::Object(root)).map_err(|e| ConfigError::Parse {
                format: "protobuf",
                reason: e.to_string(),
            })?;
        training.validate()?;
        Ok(Workload::Program(training))
    }
}

/// A snapshot as the config's `code` table (the spec reads it as an
/// uploaded snapshot, never as a path).
fn code_table(c: v1::CodeSnapshot) -> Value {
    let mut table = Map::new();
    table.insert("sha256".into(), json!(c.sha256));
    table.insert("size_bytes".into(), json!(c.size_bytes));
    table.insert("files".into(), json!(c.files));
    if let Some(commit) = c.git_commit {
        table.insert("git_commit".into(), json!(commit));
    }
    if c.git_dirty {
        table.insert("git_dirty".into(), json!(true));
    }
    Value::Object(table)
}

impl From<&CodeSnapshot> for v1::CodeSnapshot {
    fn from(c: &CodeSnapshot) -> Self {
        Self {
            sha256: c.sha256.clone(),
            size_bytes: c.size_bytes,
            files: c.files,
            git_commit: c.git_commit.clone(),
            git_dirty: c.git_dirty,
        }
    }
}

/// A config whose `code` is still a path (the client has not packed it)
/// carries no code on the wire: the client uploads it first, and the
/// coordinator's ParseTrainingConfig refuses a path.
impl From<&ProgramConfig> for v1::ProgramConfig {
    fn from(p: &ProgramConfig) -> Self {
        Self {
            command: p.command.clone(),
            working_dir: p.working_dir.clone(),
            memory_gib_per_rank: p.memory_gib_per_rank,
            heartbeat_timeout: p.heartbeat_timeout.clone(),
            env: p.env.clone().into_iter().collect(),
            code: p
                .code
                .as_ref()
                .and_then(CodeSource::snapshot)
                .map(Into::into),
            elastic: p.elastic,
            global_batch: p.global_batch,
        }
    }
}

impl From<&ProgramCheckpoint> for v1::CheckpointConfig {
    fn from(c: &ProgramCheckpoint) -> Self {
        Self {
            every_steps: None,
            keep: Some(c.keep),
            storage: c.storage.clone(),
        }
    }
}

impl From<&Workload> for v1::TrainingConfig {
    fn from(w: &Workload) -> Self {
        match w {
            Workload::Sae(config) => config.into(),
            Workload::Program(p) => Self {
                program: Some((&p.program).into()),
                checkpoint: Some((&p.checkpoint).into()),
                runtime: (!p.runtime.is_empty()).then(|| (&p.runtime).into()),
                tracking: super::tracking_message(&p.tracking),
                ..Default::default()
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program() -> v1::ProgramConfig {
        v1::ProgramConfig {
            command: vec!["/usr/bin/python3".into(), "train.py".into()],
            working_dir: "/opt/team/src".into(),
            memory_gib_per_rank: 20.0,
            heartbeat_timeout: Some("10m".into()),
            env: [("HF_HOME".to_string(), "/data/hf".to_string())].into(),
            code: None,
            ..Default::default()
        }
    }

    #[test]
    fn a_code_snapshot_round_trips_and_is_checked() {
        let with_code = |sha256: String| v1::TrainingConfig {
            program: Some(v1::ProgramConfig {
                working_dir: "jobs".into(),
                code: Some(v1::CodeSnapshot {
                    sha256,
                    size_bytes: 1234,
                    files: 7,
                    git_commit: Some("c".repeat(40)),
                    git_dirty: true,
                }),
                ..program()
            }),
            checkpoint: Some(v1::CheckpointConfig {
                keep: Some(3),
                ..Default::default()
            }),
            ..Default::default()
        };
        let p = with_code("e".repeat(64));
        let w = Workload::try_from(p.clone()).unwrap();
        assert_eq!(v1::TrainingConfig::from(&w), p);
        let err = Workload::try_from(with_code("not-a-hash".into())).unwrap_err();
        assert_eq!(err.field(), Some("program.code.sha256"));
    }

    #[test]
    fn a_program_round_trips() {
        let p = v1::TrainingConfig {
            program: Some(program()),
            checkpoint: Some(v1::CheckpointConfig {
                keep: Some(2),
                ..Default::default()
            }),
            ..Default::default()
        };
        let w = Workload::try_from(p.clone()).unwrap();
        assert_eq!(w.checkpoint_keep(), 2);
        assert_eq!(v1::TrainingConfig::from(&w), p);
    }

    #[test]
    fn tracking_round_trips_and_is_checked() {
        let tracked = |name: &str| v1::TrainingConfig {
            program: Some(program()),
            checkpoint: Some(v1::CheckpointConfig {
                keep: Some(2),
                ..Default::default()
            }),
            tracking: Some(v1::TrackingConfig {
                experiment: Some(name.into()),
            }),
            ..Default::default()
        };
        let p = tracked("sae sweeps/l1");
        let w = Workload::try_from(p.clone()).unwrap();
        assert_eq!(w.tracking().experiment.as_deref(), Some("sae sweeps/l1"));
        assert_eq!(v1::TrainingConfig::from(&w), p);
        let e = Workload::try_from(tracked("a\nb")).unwrap_err();
        assert_eq!(e.field(), Some("tracking.experiment"));
        // In TOML too, for the SAE as for programs.
        let toml = "[program]\ncommand = [\"/usr/bin/python3\", \"t.py\"]\nworking_dir = \"/opt/t\"\nmemory_gib_per_rank = 1.0\n[tracking]\nexperiment = \"x\"\n";
        let w = Workload::from_toml(toml).unwrap();
        assert_eq!(w.tracking().experiment.as_deref(), Some("x"));
        let wrong = toml.replace("experiment", "experiments");
        assert!(
            Workload::from_toml(&wrong).is_err(),
            "unknown keys are refused"
        );
    }

    #[test]
    fn a_program_takes_the_scheduling_keys_of_runtime_and_nothing_else() {
        let p = v1::TrainingConfig {
            program: Some(program()),
            checkpoint: Some(v1::CheckpointConfig {
                keep: Some(3),
                ..Default::default()
            }),
            runtime: Some(v1::RuntimeConfig {
                preemption_grace: Some("90s".into()),
                expected_duration: Some("2h".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let w = Workload::try_from(p.clone()).unwrap();
        let hints = w.schedule();
        assert_eq!(hints.preemption_grace(), std::time::Duration::from_secs(90));
        assert_eq!(
            hints.expected_duration(),
            Some(std::time::Duration::from_secs(7200))
        );
        assert_eq!(v1::TrainingConfig::from(&w), p);
        let mut device = p.clone();
        device.runtime.as_mut().unwrap().log_every_steps = Some(5);
        assert_eq!(
            Workload::try_from(device).unwrap_err().field(),
            Some("runtime.log_every_steps")
        );
        let mut long = p;
        long.runtime.as_mut().unwrap().preemption_grace = Some("3h".into());
        assert_eq!(
            Workload::try_from(long).unwrap_err().field(),
            Some("runtime.preemption_grace")
        );
    }

    #[test]
    fn sae_tables_beside_a_program_name_the_field() {
        let p = v1::TrainingConfig {
            program: Some(program()),
            optim: Some(Default::default()),
            ..Default::default()
        };
        assert_eq!(Workload::try_from(p).unwrap_err().field(), Some("optim"));
        let mut bad = program();
        bad.env.insert("WORLD_SIZE".into(), "9".into());
        let p = v1::TrainingConfig {
            program: Some(bad),
            ..Default::default()
        };
        assert_eq!(
            Workload::try_from(p).unwrap_err().field(),
            Some("program.env.WORLD_SIZE")
        );
        let mut nan = program();
        nan.memory_gib_per_rank = f64::NAN;
        let p = v1::TrainingConfig {
            program: Some(nan),
            ..Default::default()
        };
        assert_eq!(
            Workload::try_from(p).unwrap_err().field(),
            Some("program.memory_gib_per_rank")
        );
    }
}
