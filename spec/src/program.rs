//! A team's own data-parallel program as a training (`[program]`): what
//! runs (an argv, no shell), where, with how much memory per rank, and how
//! its checkpoints are kept (docs/programs.md).
//!
//! Parsing is as strict as the SAE config's: unknown keys are errors, and
//! [`ProgramTraining::validate`] names the offending key.

use crate::code::{CodeSnapshot, CodeSource};
use crate::config::ConfigError;
use crate::duration::parse_duration;
use crate::elastic::SizeRange;
use crate::launch::Launch;
use crate::location::Location;
use crate::schedule::ScheduleHints;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Component, Path};
use std::time::Duration;

/// The most arguments a command may have.
pub const MAX_ARGS: usize = 256;
/// The longest argument, environment name or value, in bytes.
pub const MAX_TEXT: usize = 4096;
/// The most `[program.env]` entries.
pub const MAX_ENV: usize = 128;
/// The largest `memory_gib_per_rank`.
pub const MAX_MEMORY_GIB: f64 = 4096.0;
/// The largest `global_batch`.
pub const MAX_GLOBAL_BATCH: i64 = 1 << 40;
/// The shortest and longest `heartbeat_timeout`.
pub const MIN_HEARTBEAT: Duration = Duration::from_secs(10);
pub const MAX_HEARTBEAT: Duration = Duration::from_secs(7 * 86_400);

/// A program training: `[program]` and `[checkpoint]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProgramTraining {
    pub program: ProgramConfig,
    #[serde(default)]
    pub checkpoint: ProgramCheckpoint,
    /// `[runtime]`: only the scheduling keys (`preemption_grace`,
    /// `expected_duration`; see [`crate::schedule`]).
    #[serde(default, skip_serializing_if = "ScheduleHints::is_empty")]
    pub runtime: ScheduleHints,
    /// `[tracking]`: where its run goes in the team's tracker.
    #[serde(
        default,
        skip_serializing_if = "crate::tracking::TrackingConfig::is_empty"
    )]
    pub tracking: crate::tracking::TrackingConfig,
}

/// What runs on every rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProgramConfig {
    /// The argv, run without a shell; the first entry an absolute path.
    pub command: Vec<String>,
    /// The working directory: without `code`, an absolute path under one
    /// of the agent's `--program-root` directories; with it, a path
    /// relative to the snapshot's root (empty: the root).
    #[serde(default)]
    pub working_dir: String,
    /// The code the program runs from, carried with the training: a
    /// directory the client packs and uploads, then its snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<CodeSource>,
    /// What one rank needs on its GPU, for placement and the memory checks.
    pub memory_gib_per_rank: f64,
    /// No progress line for this long (e.g. "10m") is a hang; unset: a
    /// program that prints none is never declared hung.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_timeout: Option<String>,
    /// Variables added to the launch contract's (which they cannot replace).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The program may be re-formed at another size of its GPU range while
    /// it runs (stopped with the preemption notice, started again at the
    /// new size from its newest checkpoint: torchrun elastic's contract).
    /// Without it a range gives one size at start, kept for the training.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub elastic: bool,
    /// The global batch the program holds at every size
    /// (`COHORT_GLOBAL_BATCH`); a range is narrowed to the sizes that
    /// divide it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_batch: Option<i64>,
}

/// How a program's checkpoints are kept: where (`storage`, as for the SAE)
/// and how many (`keep`, the newest).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProgramCheckpoint {
    #[serde(default = "default_keep")]
    pub keep: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<String>,
}

fn default_keep() -> i64 {
    3
}

impl Default for ProgramCheckpoint {
    fn default() -> Self {
        Self {
            keep: default_keep(),
            storage: None,
        }
    }
}

/// Variables a program may not set besides the contract's own: cohort's
/// namespace and the private temp dir.
fn reserved(name: &str) -> bool {
    Launch::sets(name) || name.starts_with("COHORT_") || name == "TMPDIR"
}

fn invalid(field: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.to_string(),
        reason: reason.into(),
    }
}

/// An absolute path with no `.` or `..` component and no NUL.
fn absolute(field: &str, path: &str) -> Result<(), ConfigError> {
    if path.contains('\0') || path.len() > MAX_TEXT {
        return Err(invalid(field, "not a usable path"));
    }
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err(invalid(field, format!("{path:?} is not an absolute path")));
    }
    if p.components()
        .any(|c| matches!(c, Component::CurDir | Component::ParentDir))
    {
        return Err(invalid(field, format!("{path:?} has a . or .. component")));
    }
    Ok(())
}

/// With `code`, the working directory: a plain relative path (or empty).
fn within_snapshot(path: &str) -> Result<(), ConfigError> {
    let field = "program.working_dir";
    if path.contains('\0') || path.len() > MAX_TEXT {
        return Err(invalid(field, "not a usable path"));
    }
    let plain = Path::new(path)
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if !plain {
        return Err(invalid(
            field,
            format!(
                "{path:?}: with code, working_dir is a path inside the snapshot (relative, no ..)"
            ),
        ));
    }
    Ok(())
}

fn env_name_ok(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `[program.env]`: at most [`MAX_ENV`] variables, each a plain name that
/// is none of the contract's, with a value of at most [`MAX_TEXT`] bytes.
fn validate_env(env: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    if env.len() > MAX_ENV {
        return Err(invalid(
            "program.env",
            format!("at most {MAX_ENV} variables"),
        ));
    }
    for (name, value) in env {
        let field = format!("program.env.{name}");
        if !env_name_ok(name) || name.len() > MAX_TEXT {
            return Err(invalid(
                &field,
                "not a variable name ([A-Za-z_][A-Za-z0-9_]*)",
            ));
        }
        if reserved(name) {
            return Err(invalid(
                &field,
                "set by cohort's launch contract; a training cannot replace it",
            ));
        }
        if value.contains('\0') || value.len() > MAX_TEXT {
            return Err(invalid(
                &field,
                format!("the value holds a NUL or is over {MAX_TEXT} bytes"),
            ));
        }
    }
    Ok(())
}

impl ProgramTraining {
    /// Check every value; the first problem found is returned with its key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.tracking.validate()?;
        let p = &self.program;
        let Some(first) = p.command.first() else {
            return Err(invalid(
                "program.command",
                "give the program and its arguments",
            ));
        };
        if p.command.len() > MAX_ARGS {
            return Err(invalid(
                "program.command",
                format!("at most {MAX_ARGS} arguments"),
            ));
        }
        if p.command
            .iter()
            .any(|a| a.contains('\0') || a.len() > MAX_TEXT)
        {
            return Err(invalid(
                "program.command",
                format!("an argument holds a NUL or is over {MAX_TEXT} bytes"),
            ));
        }
        absolute("program.command", first).map_err(|_| {
            invalid(
                "program.command",
                format!("{first:?}: the program must be an absolute path (it runs without a shell or PATH lookup)"),
            )
        })?;
        match &p.code {
            None if p.working_dir.is_empty() => {
                return Err(invalid(
                    "program.working_dir",
                    "give working_dir (an absolute path under an agent's --program-root) or code",
                ))
            }
            None => absolute("program.working_dir", &p.working_dir)?,
            Some(code) => {
                code.validate()?;
                within_snapshot(&p.working_dir)?;
            }
        }
        let m = p.memory_gib_per_rank;
        if !(m.is_finite() && m > 0.0 && m <= MAX_MEMORY_GIB) {
            return Err(invalid(
                "program.memory_gib_per_rank",
                format!("must be in (0, {MAX_MEMORY_GIB}] GiB"),
            ));
        }
        if let Some(text) = &p.heartbeat_timeout {
            let d = parse_duration(text).map_err(|e| invalid("program.heartbeat_timeout", e))?;
            if !(MIN_HEARTBEAT..=MAX_HEARTBEAT).contains(&d) {
                return Err(invalid(
                    "program.heartbeat_timeout",
                    "must be between 10s and 7d",
                ));
            }
        }
        if let Some(g) = p.global_batch {
            if !(1..=MAX_GLOBAL_BATCH).contains(&g) {
                return Err(invalid(
                    "program.global_batch",
                    format!("must be in 1..={MAX_GLOBAL_BATCH}"),
                ));
            }
        }
        validate_env(&p.env)?;
        let c = &self.checkpoint;
        if c.keep < 1 {
            return Err(invalid("checkpoint.keep", "must be >= 1"));
        }
        if let Some(storage) = &c.storage {
            if storage.trim().is_empty() || storage.contains('\0') {
                return Err(invalid("checkpoint.storage", "an entry is empty"));
            }
            Location::parse(storage).map_err(|e| invalid("checkpoint.storage", e))?;
        }
        self.runtime.validate("runtime")
    }

    /// The heartbeat timeout, when set (validated).
    pub fn heartbeat(&self) -> Option<Duration> {
        self.program
            .heartbeat_timeout
            .as_deref()
            .and_then(|t| parse_duration(t).ok())
    }

    /// The uploaded code snapshot, when the program carries its code.
    pub fn snapshot(&self) -> Option<&CodeSnapshot> {
        self.program.code.as_ref().and_then(CodeSource::snapshot)
    }

    /// The world sizes of `min..=max` it runs at, ascending: those that
    /// divide its global batch when it gives one (none is an error listing
    /// the nearest that would), all of them otherwise.
    pub fn elastic_sizes(&self, min: i64, max: i64) -> Result<Vec<i64>, String> {
        let global = self.program.global_batch;
        let divides = |w: i64| global.is_none_or(|g| g % w == 0);
        crate::elastic::sizes_where(SizeRange { min, max }, divides).map_err(|would| {
            format!(
                "program.global_batch {} divides over none of {min}..={max} ranks; sizes that would: {}",
                global.unwrap_or_default(),
                crate::elastic::list(&would)
            )
        })
    }

    /// Bytes one rank needs on its GPU.
    pub fn memory_bytes_per_rank(&self) -> u64 {
        (self.program.memory_gib_per_rank * (1u64 << 30) as f64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program(extra: &str) -> Result<ProgramTraining, ConfigError> {
        let text = format!(
            "[program]\ncommand = [\"/usr/bin/python3\", \"train.py\"]\n\
             working_dir = \"/opt/team/src\"\nmemory_gib_per_rank = 2\n{extra}"
        );
        let t: ProgramTraining = toml::from_str(&text).map_err(|e| ConfigError::Parse {
            format: "TOML",
            reason: e.to_string(),
        })?;
        t.validate()?;
        Ok(t)
    }

    fn field_of(extra: &str) -> String {
        program(extra)
            .unwrap_err()
            .field()
            .map(str::to_string)
            .unwrap_or_default()
    }

    #[test]
    fn a_minimal_program_takes_the_defaults() {
        let t = program("").unwrap();
        assert_eq!(t.checkpoint.keep, 3);
        assert_eq!(t.checkpoint.storage, None);
        assert_eq!(t.heartbeat(), None);
        assert_eq!(t.memory_bytes_per_rank(), 2 << 30);
    }

    #[test]
    fn an_elastic_program_runs_at_the_sizes_that_divide_its_global_batch() {
        let t = program("elastic = true\nglobal_batch = 96").unwrap();
        assert!(t.program.elastic);
        assert_eq!(t.elastic_sizes(2, 8), Ok(vec![2, 3, 4, 6, 8]));
        let err = t.elastic_sizes(5, 5).unwrap_err();
        assert!(
            err.ends_with("sizes that would: 1, 2, 3, 4, 6, 8, 12, 16"),
            "{err}"
        );
        let free = program("elastic = true").unwrap();
        assert_eq!(free.elastic_sizes(3, 5), Ok(vec![3, 4, 5]));
        assert_eq!(field_of("global_batch = 0"), "program.global_batch");
    }

    #[test]
    fn each_bad_value_names_its_key() {
        assert_eq!(
            field_of("heartbeat_timeout = \"1s\""),
            "program.heartbeat_timeout"
        );
        assert_eq!(
            field_of("heartbeat_timeout = \"soon\""),
            "program.heartbeat_timeout"
        );
        assert_eq!(field_of("[program.env]\nRANK = \"3\""), "program.env.RANK");
        assert_eq!(
            field_of("[program.env]\nCOHORT_RESUME_DIR = \"/x\""),
            "program.env.COHORT_RESUME_DIR"
        );
        assert_eq!(
            field_of("[program.env]\n\"A-B\" = \"x\""),
            "program.env.A-B"
        );
        assert_eq!(field_of("[checkpoint]\nkeep = 0"), "checkpoint.keep");
        let relative =
            "[program]\ncommand = [\"python\"]\nworking_dir = \"/a\"\nmemory_gib_per_rank = 1";
        let t: ProgramTraining = toml::from_str(relative).unwrap();
        assert_eq!(t.validate().unwrap_err().field(), Some("program.command"));
        let dotdot = "[program]\ncommand = [\"/bin/x\"]\nworking_dir = \"/a/../etc\"\nmemory_gib_per_rank = 1";
        let t: ProgramTraining = toml::from_str(dotdot).unwrap();
        assert_eq!(
            t.validate().unwrap_err().field(),
            Some("program.working_dir")
        );
        let no_memory =
            "[program]\ncommand = [\"/bin/x\"]\nworking_dir = \"/a\"\nmemory_gib_per_rank = 0";
        let t: ProgramTraining = toml::from_str(no_memory).unwrap();
        assert_eq!(
            t.validate().unwrap_err().field(),
            Some("program.memory_gib_per_rank")
        );
    }

    #[test]
    fn code_makes_working_dir_relative_to_the_snapshot() {
        let parse = |text: &str| -> Result<ProgramTraining, ConfigError> {
            let t: ProgramTraining = toml::from_str(text).unwrap();
            t.validate().map(|()| t)
        };
        let head =
            "[program]\ncommand = [\"/usr/bin/python3\", \"train.py\"]\nmemory_gib_per_rank = 1\n";
        let t = parse(&format!("{head}code = \"./src\"")).unwrap();
        assert_eq!(t.program.working_dir, "");
        assert!(t.snapshot().is_none());
        assert!(parse(&format!("{head}code = \"src\"\nworking_dir = \"jobs/a\"")).is_ok());
        for bad in ["/opt/src", "../up", "a/../../b"] {
            let err = parse(&format!("{head}code = \"src\"\nworking_dir = \"{bad}\"")).unwrap_err();
            assert_eq!(err.field(), Some("program.working_dir"), "{bad}");
        }
        let err = parse(head).unwrap_err();
        assert_eq!(err.field(), Some("program.working_dir"));
        let sha = "0f".repeat(32);
        let t = parse(&format!("{head}code = {{ sha256 = \"{sha}\", size_bytes = 5, files = 2, git_commit = \"{}\", git_dirty = true }}", "a".repeat(40))).unwrap();
        assert_eq!(t.snapshot().unwrap().sha256, sha);
        assert!(t.snapshot().unwrap().git_dirty);
    }

    #[test]
    fn env_and_heartbeat_are_kept() {
        let t =
            program("heartbeat_timeout = \"10m\"\n[program.env]\nHF_HOME = \"/data/hf\"").unwrap();
        assert_eq!(t.heartbeat(), Some(Duration::from_secs(600)));
        assert_eq!(t.program.env["HF_HOME"], "/data/hf");
    }
}
