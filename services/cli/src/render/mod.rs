//! How results are shown: aligned tables for people ([`table`]), the API's
//! messages as JSON for scripts ([`json`]), and the live progress bar ([`progress`]).

pub mod cost;
pub mod doctor;
pub mod eta;
pub mod json;
pub mod preemptions;
pub mod program;
pub mod progress;
pub mod resizes;
pub mod table;

use crate::errors::CliError;
use std::io::Write;

/// The `-o/--output` choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Aligned tables and progress bars for people.
    Table,
    /// The API's messages as JSON (one object per line for streams).
    Json,
}

/// Writes `text` and a newline to stdout and flushes it.
pub fn emit(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")?;
    out.flush()?;
    Ok(())
}

/// Writes one JSON value on one line.
pub fn emit_json(value: &serde_json::Value) -> Result<(), CliError> {
    emit(&value.to_string())
}

/// An enum value's proto name without its type prefix, lowercased:
/// `("GPU_AVAILABILITY_BUSY", "GPU_AVAILABILITY_")` -> `"busy"`.
pub fn short_name(name: &str, prefix: &str) -> String {
    name.strip_prefix(prefix)
        .unwrap_or(name)
        .to_ascii_lowercase()
}

/// A timestamp as `2026-11-22T14:05:18Z` (whole seconds), or `-` when unset.
pub fn time(ts: Option<&prost_types::Timestamp>) -> String {
    match ts {
        Some(ts) => prost_types::Timestamp {
            seconds: ts.seconds,
            nanos: 0,
        }
        .to_string(),
        None => "-".to_string(),
    }
}

/// How long before `now` a timestamp was, e.g. `3s ago`, `5m ago`; `-` when unset.
pub fn ago(ts: Option<&prost_types::Timestamp>, now: std::time::SystemTime) -> String {
    let Some(ts) = ts else {
        return "-".to_string();
    };
    let now = now
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let secs = now.saturating_sub(ts.seconds).max(0);
    match secs {
        0..60 => format!("{secs}s ago"),
        60..3600 => format!("{}m ago", secs / 60),
        3600..86400 => format!("{}h ago", secs / 3600),
        _ => format!("{}d ago", secs / 86400),
    }
}

/// How far after `now` a timestamp is, e.g. `in 12m`, `in 3h 05m`, `now`
/// (past or this second); `-` when unset.
pub fn until(ts: Option<&prost_types::Timestamp>, now: std::time::SystemTime) -> String {
    let Some(ts) = ts else {
        return "-".to_string();
    };
    let now = now
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    match ts.seconds.saturating_sub(now) {
        s if s <= 0 => "now".to_string(),
        s if s < 86_400 => format!(
            "in {}",
            eta::human(std::time::Duration::from_secs(s as u64))
        ),
        s => format!("in {}d {:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// Bytes in GiB with one decimal.
pub fn gib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1u64 << 30) as f64)
}

/// Bytes in the largest binary unit that keeps the number >= 1, e.g. `1.5 GiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// An optional number with a unit, `-` when unset.
pub fn opt_num(value: Option<f64>, decimals: usize, unit: &str) -> String {
    match value {
        Some(v) => format!("{v:.decimals$}{unit}"),
        None => "-".to_string(),
    }
}

/// A loss or other small float: 4 significant digits.
pub fn float(v: f64) -> String {
    if v == 0.0 || (1e-3..1e4).contains(&v.abs()) {
        format!("{v:.4}")
    } else {
        format!("{v:.3e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn ages() {
        let now = UNIX_EPOCH + Duration::from_secs(100_000);
        let at = |secs| prost_types::Timestamp {
            seconds: secs,
            nanos: 0,
        };
        assert_eq!(ago(Some(&at(99_997)), now), "3s ago");
        assert_eq!(ago(Some(&at(99_000)), now), "16m ago");
        assert_eq!(ago(Some(&at(90_000)), now), "2h ago");
        assert_eq!(ago(Some(&at(0)), now), "1d ago");
        assert_eq!(ago(Some(&at(200_000)), now), "0s ago");
        assert_eq!(ago(None, now), "-");
    }

    #[test]
    fn byte_units() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
    }
}
