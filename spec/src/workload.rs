//! What a training runs: the built-in SAE ([`TrainingConfig`]) or a team's
//! own program ([`ProgramTraining`]). A config with a `[program]` table is
//! a program; any other is the SAE, so every SAE config keeps working
//! unchanged. Stored and sent as the JSON of whichever it is.

use crate::config::{ConfigError, TrainingConfig};
use crate::program::ProgramTraining;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The table that makes a config a program.
pub const PROGRAM_TABLE: &str = "program";

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
// The SAE is the common case and is read everywhere; boxing it would cost
// every reader an indirection for a few hundred bytes per training.
#[allow(clippy::large_enum_variant)]
pub enum Workload {
    Sae(TrainingConfig),
    Program(ProgramTraining),
}

impl From<TrainingConfig> for Workload {
    fn from(config: TrainingConfig) -> Self {
        Workload::Sae(config)
    }
}

impl From<ProgramTraining> for Workload {
    fn from(program: ProgramTraining) -> Self {
        Workload::Program(program)
    }
}

fn parse_error(format: &'static str, reason: impl ToString) -> ConfigError {
    ConfigError::Parse {
        format,
        reason: reason.to_string(),
    }
}

impl Workload {
    /// Its `[tracking]` table.
    pub fn tracking(&self) -> &crate::tracking::TrackingConfig {
        match self {
            Workload::Sae(c) => &c.tracking,
            Workload::Program(p) => &p.tracking,
        }
    }

    /// Parse TOML text (strict) and validate it.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| parse_error("TOML", e.message()))?;
        if table.contains_key(PROGRAM_TABLE) {
            let program: ProgramTraining =
                toml::from_str(text).map_err(|e| parse_error("TOML", e.message()))?;
            program.validate()?;
            Ok(Workload::Program(program))
        } else {
            TrainingConfig::from_toml(text).map(Workload::Sae)
        }
    }

    /// Parse JSON text (strict) and validate it.
    pub fn from_json(text: &str) -> Result<Self, ConfigError> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| parse_error("JSON", e))?;
        Self::from_value(value)
    }

    /// From a JSON value (strict) and validate it.
    pub fn from_value(value: serde_json::Value) -> Result<Self, ConfigError> {
        if value.get(PROGRAM_TABLE).is_some() {
            let program: ProgramTraining =
                serde_json::from_value(value).map_err(|e| parse_error("JSON", e))?;
            program.validate()?;
            Ok(Workload::Program(program))
        } else {
            let text = value.to_string();
            TrainingConfig::from_json(&text).map(Workload::Sae)
        }
    }

    /// The JSON a coordinator stored (as [`Self::to_json`] wrote it), read
    /// back without validating again and without building a
    /// `serde_json::Value` first: a scan for a top-level `program` key that
    /// allocates nothing, then the text straight into the type it names.
    /// Describing a page of 50 trainings read their configs through a
    /// `Value` for a fifth of its time (docs/benchmarks.md).
    pub fn from_stored_json(text: &str) -> serde_json::Result<Self> {
        /// Only whether the key is there; every other key is skipped.
        #[derive(Deserialize)]
        struct Probe {
            program: Option<serde::de::IgnoredAny>,
        }
        let probe: Probe = serde_json::from_str(text)?;
        if probe.program.is_some() {
            serde_json::from_str(text).map(Workload::Program)
        } else {
            serde_json::from_str(text).map(Workload::Sae)
        }
    }

    /// Read a `.json` file as JSON and anything else as TOML.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let (text, json) = crate::config::read_config(path)?;
        if json {
            Self::from_json(&text)
        } else {
            Self::from_toml(&text)
        }
    }

    /// [`Self::from_file`] for a job file that may also say how many GPUs
    /// it runs on: a top-level `gpus` (a count or a range), taken out
    /// before the workload is parsed.
    pub fn from_job_file(path: &Path) -> Result<(Self, Option<crate::elastic::Gpus>), ConfigError> {
        let (text, json) = crate::config::read_config(path)?;
        let mut value: serde_json::Value = if json {
            serde_json::from_str(&text).map_err(|e| parse_error("JSON", e))?
        } else {
            let table: toml::Table = text
                .parse()
                .map_err(|e: toml::de::Error| parse_error("TOML", e.message()))?;
            if !table.contains_key("gpus") {
                return Ok((Self::from_toml(&text)?, None));
            }
            serde_json::to_value(table).map_err(|e| parse_error("TOML", e))?
        };
        let gpus = match value.as_object_mut().and_then(|o| o.remove("gpus")) {
            Some(gpus) => Some(crate::elastic::Gpus::from_json(gpus)?),
            None => None,
        };
        Ok((Self::from_value(value)?, gpus))
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("config serialises")
    }

    pub fn sae(&self) -> Option<&TrainingConfig> {
        match self {
            Workload::Sae(config) => Some(config),
            Workload::Program(_) => None,
        }
    }

    /// Whether it may be re-formed at another size of a GPU range while it
    /// runs: the built-in SAE always, a program that says `elastic = true`.
    pub fn is_elastic(&self) -> bool {
        match self {
            Workload::Sae(_) => true,
            Workload::Program(p) => p.program.elastic,
        }
    }

    pub fn program(&self) -> Option<&ProgramTraining> {
        match self {
            Workload::Program(program) => Some(program),
            Workload::Sae(_) => None,
        }
    }

    /// How many complete checkpoints are kept.
    pub fn checkpoint_keep(&self) -> i64 {
        match self {
            Workload::Sae(c) => c.checkpoint.keep,
            Workload::Program(p) => p.checkpoint.keep,
        }
    }

    /// Where checkpoints go (unset: rank 0's run directory).
    pub fn checkpoint_storage(&self) -> Option<&str> {
        match self {
            Workload::Sae(c) => c.checkpoint.storage.as_deref(),
            Workload::Program(p) => p.checkpoint.storage.as_deref(),
        }
    }

    /// What the training tells the scheduler (`[runtime]`'s
    /// `preemption_grace` and `expected_duration`).
    pub fn schedule(&self) -> crate::schedule::ScheduleHints {
        match self {
            Workload::Sae(c) => c.runtime.schedule(),
            Workload::Program(p) => p.runtime.clone(),
        }
    }
}

/// Stored JSON is read back the same way it is written: a `program` key
/// makes it a program.
impl<'de> Deserialize<'de> for Workload {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        if value.get(PROGRAM_TABLE).is_some() {
            serde_json::from_value(value)
                .map(Workload::Program)
                .map_err(serde::de::Error::custom)
        } else {
            serde_json::from_value(value)
                .map(Workload::Sae)
                .map_err(serde::de::Error::custom)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROGRAM: &str = r#"
[program]
command = ["/opt/team/venv/bin/python", "/opt/team/src/train.py", "--epochs", "3"]
working_dir = "/opt/team/src"
memory_gib_per_rank = 20
heartbeat_timeout = "10m"
[program.env]
HF_HOME = "/data/hf"
[checkpoint]
keep = 3
"#;

    #[test]
    fn a_program_table_makes_a_program_and_round_trips_through_json() {
        let w = Workload::from_toml(PROGRAM).unwrap();
        let p = w.program().expect("a program");
        assert_eq!(p.program.command.len(), 4);
        assert_eq!(w.checkpoint_keep(), 3);
        let json = w.to_json();
        assert_eq!(Workload::from_json(&json).unwrap(), w);
        let stored: Workload = serde_json::from_str(&json).unwrap();
        assert_eq!(stored, w);
        assert_eq!(Workload::from_stored_json(&json).unwrap(), w);
    }

    #[test]
    fn an_sae_config_stays_an_sae() {
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/sae.toml"),
        )
        .unwrap();
        let w = Workload::from_toml(&text).unwrap();
        assert!(w.sae().is_some());
        let stored: Workload = serde_json::from_str(&w.to_json()).unwrap();
        assert_eq!(stored, w);
        assert_eq!(Workload::from_stored_json(&w.to_json()).unwrap(), w);
    }

    #[test]
    fn stored_json_is_read_by_its_program_key_and_bad_json_is_an_error() {
        let program = Workload::from_toml(PROGRAM).unwrap();
        assert!(Workload::from_stored_json(&program.to_json())
            .unwrap()
            .program()
            .is_some());
        assert!(Workload::from_stored_json("{").is_err());
        assert!(Workload::from_stored_json("[]").is_err());
    }

    #[test]
    fn sae_tables_beside_a_program_are_refused() {
        let text = format!("{PROGRAM}\n[optim]\nbatch_size = 4\n");
        let err = Workload::from_toml(&text).unwrap_err();
        assert!(err.to_string().contains("optim"), "{err}");
        let err = Workload::from_json(
            r#"{"program": {"command": ["/bin/x"], "memory_gib_per_rank": 1}}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("working_dir"), "{err}");
    }
}
