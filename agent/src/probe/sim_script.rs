//! Overrides for simulated GPUs from a file, so that tests driving the real
//! binary can script a hot GPU or a full memory: `--simulate-overrides FILE`.
//!
//! One override per line, `INDEX FIELD VALUE`, e.g. `0 temperature_c 91`;
//! `#` starts a comment. The file is re-read whenever it changes; a line
//! removed from it releases its field.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::SystemTime;

use thiserror::Error;

use super::{SimControls, SimField};

#[derive(Debug, Error, PartialEq)]
pub enum SimScriptError {
    #[error("line {line}: expected `INDEX FIELD VALUE`, e.g. `0 temperature_c 91`")]
    Shape { line: usize },
    #[error("line {line}: {index:?} is not a gpu index")]
    Index { line: usize, index: String },
    #[error("line {line}: unknown field {field:?}; known: {}", SimField::NAMES.join(", "))]
    Field { line: usize, field: String },
    #[error("line {line}: {value:?} is not a number")]
    Value { line: usize, value: String },
}

/// Parses the whole file; any bad line rejects it.
pub fn parse_overrides(text: &str) -> Result<Vec<(u32, SimField, f64)>, SimScriptError> {
    let mut overrides = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let content = raw.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        let parts: Vec<&str> = content.split_whitespace().collect();
        let [index, field, value] = parts[..] else {
            return Err(SimScriptError::Shape { line });
        };
        let index = index.parse().map_err(|_| SimScriptError::Index {
            line,
            index: index.to_string(),
        })?;
        let field = field.parse().map_err(|_| SimScriptError::Field {
            line,
            field: field.to_string(),
        })?;
        let value = value
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| SimScriptError::Value {
                line,
                value: value.to_string(),
            })?;
        overrides.push((index, field, value));
    }
    Ok(overrides)
}

impl SimField {
    /// The names used in override files.
    pub const NAMES: [&'static str; 12] = [
        "utilization_gpu",
        "utilization_memory",
        "temperature_c",
        "power_draw_w",
        "memory_used_bytes",
        "sm_clock_mhz",
        "memory_clock_mhz",
        "ecc_corrected",
        "ecc_uncorrected",
        "xid_errors",
        "last_xid",
        "foreign_pid",
    ];
    const ALL: [SimField; 12] = [
        SimField::UtilizationGpu,
        SimField::UtilizationMemory,
        SimField::TemperatureC,
        SimField::PowerDrawW,
        SimField::MemoryUsedBytes,
        SimField::SmClockMhz,
        SimField::MemoryClockMhz,
        SimField::EccCorrected,
        SimField::EccUncorrected,
        SimField::XidErrors,
        SimField::LastXid,
        SimField::ForeignPid,
    ];
}

impl FromStr for SimField {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, ()> {
        SimField::NAMES
            .iter()
            .position(|n| n.eq_ignore_ascii_case(s))
            .map(|i| SimField::ALL[i])
            .ok_or(())
    }
}

/// Watches an override file and applies it to [`SimControls`].
#[derive(Debug)]
pub struct OverrideFile {
    path: PathBuf,
    seen: Option<(SystemTime, u64)>,
    applied: HashSet<(u32, SimField)>,
}

impl OverrideFile {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            seen: None,
            applied: HashSet::new(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Re-reads the file if it changed. A missing file means no overrides; a
    /// malformed one is reported and the previous overrides stay. Blocking:
    /// probes are sampled on a blocking thread.
    #[allow(clippy::disallowed_methods)]
    pub fn refresh(&mut self, controls: &SimControls) {
        let stamp = std::fs::metadata(&self.path)
            .ok()
            .map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()));
        if stamp == self.seen {
            return;
        }
        self.seen = stamp;
        let text = match stamp {
            Some(_) => std::fs::read_to_string(&self.path).unwrap_or_default(),
            None => String::new(),
        };
        match parse_overrides(&text) {
            Ok(overrides) => {
                for (index, field) in self.applied.drain() {
                    controls.clear_override(index, field);
                }
                for (index, field, value) in overrides {
                    controls.set_override(index, field, value);
                    self.applied.insert((index, field));
                }
                tracing::info!(path = %self.path.display(), overrides = self.applied.len(), "simulated gpu overrides loaded");
            }
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "simulated gpu overrides ignored");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lines_comments_and_rejects_garbage() {
        let text = "# hot gpu\n0 temperature_c 91\n\n1 memory_used_bytes 1.5e10 # nearly full\n";
        assert_eq!(
            parse_overrides(text).unwrap(),
            vec![
                (0, SimField::TemperatureC, 91.0),
                (1, SimField::MemoryUsedBytes, 1.5e10)
            ]
        );
        assert_eq!(
            parse_overrides("0 temperature_c"),
            Err(SimScriptError::Shape { line: 1 })
        );
        assert!(matches!(
            parse_overrides("x temperature_c 1"),
            Err(SimScriptError::Index { .. })
        ));
        let err = parse_overrides("\n0 heat 1").unwrap_err();
        assert!(err.to_string().contains("line 2"), "{err}");
        assert!(err.to_string().contains("temperature_c"), "{err}");
        assert!(matches!(
            parse_overrides("0 temperature_c hot"),
            Err(SimScriptError::Value { .. })
        ));
    }
}
