//! `--simulate-gpus N[:MEM]`: how many GPUs to simulate and how much memory each has.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

/// Memory of a simulated GPU when the spec gives none: 16 GiB.
pub const DEFAULT_SIM_MEMORY_BYTES: u64 = 16 << 30;
/// The most GPUs one agent simulates.
pub const MAX_SIM_GPUS: u32 = 64;
const MIN_SIM_MEMORY_BYTES: u64 = 256 << 20;

/// A parsed `N[:MEM]`, e.g. `2`, `2:16GiB`, `4:24000MiB`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimSpec {
    pub count: u32,
    pub memory_bytes: u64,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum SimSpecError {
    #[error("expected N[:MEM], e.g. 2 or 2:16GiB; got an empty value")]
    Empty,
    #[error("gpu count {0:?} is not a whole number (expected N[:MEM], e.g. 2:16GiB)")]
    BadCount(String),
    #[error("gpu count must be between 1 and {MAX_SIM_GPUS}, got {0}")]
    CountOutOfRange(u64),
    #[error("memory {0:?} is not a size; write it as a number and a unit, e.g. 16GiB or 24000MiB")]
    BadMemory(String),
    #[error("memory {0:?} has no unit; write e.g. 16GiB or 24000MiB")]
    MissingUnit(String),
    #[error(
        "memory unit {unit:?} in {value:?} is unknown; use KiB, MiB, GiB, TiB (or KB, MB, GB, TB)"
    )]
    UnknownUnit { value: String, unit: String },
    #[error("memory {0:?} is too small; a simulated gpu needs at least 256MiB")]
    MemoryTooSmall(String),
    #[error("memory {0:?} is too large")]
    MemoryTooLarge(String),
}

impl FromStr for SimSpec {
    type Err = SimSpecError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.is_empty() {
            return Err(SimSpecError::Empty);
        }
        let (count_text, memory_text) = match s.split_once(':') {
            Some((c, m)) => (c.trim(), Some(m.trim())),
            None => (s, None),
        };
        let count: u64 = count_text
            .parse()
            .map_err(|_| SimSpecError::BadCount(count_text.to_string()))?;
        if count == 0 || count > u64::from(MAX_SIM_GPUS) {
            return Err(SimSpecError::CountOutOfRange(count));
        }
        let memory_bytes = match memory_text {
            Some(m) => parse_memory(m)?,
            None => DEFAULT_SIM_MEMORY_BYTES,
        };
        Ok(SimSpec {
            count: count as u32,
            memory_bytes,
        })
    }
}

impl fmt::Display for SimSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.memory_bytes % (1 << 30) == 0 {
            write!(f, "{}:{}GiB", self.count, self.memory_bytes >> 30)
        } else {
            write!(f, "{}:{}MiB", self.count, self.memory_bytes >> 20)
        }
    }
}

/// A size with a mandatory unit: binary (KiB, MiB, GiB, TiB) or decimal
/// (KB, MB, GB, TB); units are case-insensitive.
fn parse_memory(text: &str) -> Result<u64, SimSpecError> {
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let unit = unit.trim();
    if number.is_empty() {
        return Err(SimSpecError::BadMemory(text.to_string()));
    }
    if unit.is_empty() {
        return Err(SimSpecError::MissingUnit(text.to_string()));
    }
    let value: f64 = number
        .parse()
        .map_err(|_| SimSpecError::BadMemory(text.to_string()))?;
    let scale: f64 = match unit.to_ascii_lowercase().as_str() {
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        _ => {
            return Err(SimSpecError::UnknownUnit {
                value: text.to_string(),
                unit: unit.to_string(),
            })
        }
    };
    let bytes = value * scale;
    if !bytes.is_finite() || bytes > 1e15 {
        return Err(SimSpecError::MemoryTooLarge(text.to_string()));
    }
    let bytes = bytes.round() as u64;
    if bytes < MIN_SIM_MEMORY_BYTES {
        return Err(SimSpecError::MemoryTooSmall(text.to_string()));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<SimSpec, SimSpecError> {
        s.parse()
    }

    #[test]
    fn count_alone_gets_the_default_memory() {
        assert_eq!(
            parse("2").unwrap(),
            SimSpec {
                count: 2,
                memory_bytes: DEFAULT_SIM_MEMORY_BYTES
            }
        );
    }

    #[test]
    fn binary_and_decimal_units() {
        assert_eq!(parse("2:16GiB").unwrap().memory_bytes, 16 << 30);
        assert_eq!(parse("4:24000MiB").unwrap().memory_bytes, 24000 << 20);
        assert_eq!(parse("1:80gb").unwrap().memory_bytes, 80_000_000_000);
        assert_eq!(parse(" 3 : 1.5GiB ").unwrap().memory_bytes, 3 << 29);
        assert_eq!(parse("4:24000MiB").unwrap().count, 4);
    }

    #[test]
    fn display_round_trips() {
        for s in ["2:16GiB", "4:24000MiB"] {
            assert_eq!(parse(s).unwrap().to_string(), s);
        }
    }

    #[test]
    fn errors_say_what_is_wrong() {
        assert_eq!(parse(""), Err(SimSpecError::Empty));
        assert_eq!(parse("two"), Err(SimSpecError::BadCount("two".into())));
        assert_eq!(parse("0"), Err(SimSpecError::CountOutOfRange(0)));
        assert_eq!(parse("65"), Err(SimSpecError::CountOutOfRange(65)));
        assert_eq!(parse("-1"), Err(SimSpecError::BadCount("-1".into())));
        assert_eq!(parse("2:16"), Err(SimSpecError::MissingUnit("16".into())));
        assert_eq!(parse("2:GiB"), Err(SimSpecError::BadMemory("GiB".into())));
        assert!(matches!(
            parse("2:16XB"),
            Err(SimSpecError::UnknownUnit { .. })
        ));
        assert_eq!(
            parse("2:1MiB"),
            Err(SimSpecError::MemoryTooSmall("1MiB".into()))
        );
        assert!(parse("2:1.2.3GiB").is_err());
        let msg = parse("2:16").unwrap_err().to_string();
        assert!(msg.contains("16GiB"), "{msg}");
    }
}
