//! Elastic sizes: a training that may run at any world size of a range
//! keeps its global batch, and so its optimisation, at every size
//! (DESIGN.md §11; docs/scheduling.md "Elastic trainings").
//!
//! The rule, one for every size: at `W` ranks each rank's share of the
//! global batch `G` is `P = G / W` (`W` must divide `G`); its accumulation
//! is the smallest divisor `a` of `P` whose micro-batch `P / a` is at most
//! the configured micro-batch (`optim.batch_size`, the largest a rank's
//! memory was sized for), and at most [`MAX_ACCUMULATION`]. A size with no
//! such split is skipped for the nearest one that has one. The sampler
//! reads a step's samples by `G` alone, so every size reads the same
//! samples at every step.

use crate::TrainingConfig;
use serde::{Deserialize, Serialize};

/// The most micro-batches one optimizer step may take.
pub const MAX_ACCUMULATION: i64 = 1024;
/// The largest world size a range may ask for.
pub const MAX_WORLD_SIZE: i64 = 1024;

/// How one world size runs the global batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    /// Rows per rank and micro-batch (`optim.batch_size` at this size).
    pub micro_batch: i64,
    /// Micro-batches per step (`optim.accumulation_steps` at this size).
    pub accumulation: i64,
}

/// The split of `global` over `world` ranks with micro-batches of at most
/// `largest_micro`; None when `world` cannot take it.
pub fn split(global: i64, world: i64, largest_micro: i64) -> Option<Split> {
    if global <= 0 || world <= 0 || largest_micro <= 0 || global % world != 0 {
        return None;
    }
    let share = global / world;
    let least = (share + largest_micro - 1) / largest_micro;
    (least..=MAX_ACCUMULATION.min(share))
        .find(|a| share % a == 0)
        .map(|a| Split {
            micro_batch: share / a,
            accumulation: a,
        })
}

/// The sizes of `range` that `runs` holds for, ascending; none: the (at
/// most 8) sizes nearest the range that it holds for instead.
pub fn sizes_where(range: SizeRange, runs: impl Fn(i64) -> bool) -> Result<Vec<i64>, Vec<i64>> {
    let found: Vec<i64> = (range.min.max(1)..=range.max.min(MAX_WORLD_SIZE))
        .filter(|&w| runs(w))
        .collect();
    if !found.is_empty() {
        return Ok(found);
    }
    let mut would: Vec<i64> = (1..=MAX_WORLD_SIZE).filter(|&w| runs(w)).collect();
    would.sort_by_key(|w| (w - range.min).abs().min((w - range.max).abs()));
    would.truncate(8);
    would.sort_unstable();
    Err(would)
}

/// A range of world sizes (`gpus = { min = 2, max = 8 }`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SizeRange {
    pub min: i64,
    pub max: i64,
}

/// How many GPUs a job file or a command line asks for: `gpus = 4`, or a
/// range `gpus = { min = 2, max = 8 }` (`--gpus 4`, `--gpus 2..8`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Gpus {
    Count(i64),
    Range(SizeRange),
}

impl Gpus {
    /// What a job file's top-level `gpus` holds, checked.
    pub fn from_json(value: serde_json::Value) -> Result<Self, crate::ConfigError> {
        let gpus: Gpus = serde_json::from_value(value).map_err(|_| {
            crate::ConfigError::invalid(
                "gpus",
                "give a count (gpus = 4) or a range (gpus = { min = 2, max = 8 })",
            )
        })?;
        gpus.checked()
            .map_err(|why| crate::ConfigError::invalid("gpus", why))
    }

    fn checked(self) -> Result<Self, String> {
        let ok = match self {
            Gpus::Count(n) => (1..=MAX_WORLD_SIZE).contains(&n),
            Gpus::Range(r) => {
                (1..=MAX_WORLD_SIZE).contains(&r.min) && (r.min..=MAX_WORLD_SIZE).contains(&r.max)
            }
        };
        if ok {
            Ok(self)
        } else {
            Err(format!(
                "a count in 1..={MAX_WORLD_SIZE}, or a range min..max with 1 <= min <= max <= {MAX_WORLD_SIZE}"
            ))
        }
    }
}

impl std::str::FromStr for Gpus {
    type Err = String;

    /// `4` or `2..8`.
    fn from_str(s: &str) -> Result<Self, String> {
        let number = |t: &str| {
            t.trim()
                .parse::<i64>()
                .map_err(|_| format!("{s:?}: give a count (4) or a range (2..8)"))
        };
        let gpus = match s.split_once("..") {
            Some((min, max)) => Gpus::Range(SizeRange {
                min: number(min)?,
                max: number(max.trim_start_matches('='))?,
            }),
            None => Gpus::Count(number(s)?),
        };
        gpus.checked()
    }
}

/// A global batch no size of the range can split.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the global batch {global} (micro-batches of at most {largest_micro}) splits over none of \
     {min}..={max} ranks; sizes that would: {}",
    list(would)
)]
pub struct NoSize {
    pub global: i64,
    pub largest_micro: i64,
    pub min: i64,
    pub max: i64,
    /// The sizes nearest the range that can split it (at most 8).
    pub would: Vec<i64>,
}

pub(crate) fn list(sizes: &[i64]) -> String {
    if sizes.is_empty() {
        return "none up to 1024".to_string();
    }
    sizes
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

impl TrainingConfig {
    /// The global batch a training of at most `max` ranks holds:
    /// `optim.global_batch`, else the config's batch at its largest size.
    pub fn global_batch_for(&self, max: i64) -> i64 {
        let o = &self.optim;
        o.global_batch
            .unwrap_or(o.batch_size * o.accumulation_steps * max)
    }

    /// The sizes of `range` this config runs at, ascending; none is an
    /// error that lists the sizes nearest the range that would work.
    pub fn elastic_sizes(&self, range: SizeRange) -> Result<Vec<i64>, NoSize> {
        let global = self.global_batch_for(range.max);
        let micro = self.optim.batch_size;
        sizes_where(range, |w| split(global, w, micro).is_some()).map_err(|would| NoSize {
            global,
            largest_micro: micro,
            min: range.min,
            max: range.max,
            would,
        })
    }

    /// This config as `world` ranks run it when its sizes go up to `max`:
    /// the micro-batch and accumulation of the split, everything else as
    /// written. A fixed-size config without `optim.global_batch` is
    /// returned as it is; None when `world` cannot split the global batch.
    pub fn at_world_size(&self, world: i64, max: i64) -> Option<TrainingConfig> {
        if self.optim.global_batch.is_none() && world == max {
            return Some(self.clone());
        }
        let global = self.global_batch_for(max);
        let s = split(global, world, self.optim.batch_size)?;
        let mut at = self.clone();
        at.optim.batch_size = s.micro_batch;
        at.optim.accumulation_steps = s.accumulation;
        at.optim.global_batch = Some(global);
        Some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpus_are_a_count_or_a_range() {
        assert_eq!("4".parse(), Ok(Gpus::Count(4)));
        assert_eq!(
            "2..8".parse(),
            Ok(Gpus::Range(SizeRange { min: 2, max: 8 }))
        );
        assert_eq!(
            "2..=8".parse(),
            Ok(Gpus::Range(SizeRange { min: 2, max: 8 }))
        );
        assert!("8..2".parse::<Gpus>().is_err());
        assert!("0".parse::<Gpus>().is_err());
        assert!("two".parse::<Gpus>().is_err());
        let range = serde_json::json!({"min": 1, "max": 4});
        assert_eq!(
            Gpus::from_json(range),
            Ok(Gpus::Range(SizeRange { min: 1, max: 4 }))
        );
        let err = Gpus::from_json(serde_json::json!({"min": 1})).unwrap_err();
        assert!(err.to_string().contains("gpus"), "{err}");
    }

    #[test]
    fn the_split_keeps_the_global_batch_under_the_largest_micro_batch() {
        for (global, world, micro, want) in [
            (64, 2, 32, (32, 1)),
            (64, 1, 32, (32, 2)),
            (64, 4, 32, (16, 1)),
            (96, 1, 32, (32, 3)),
            // 100 / 1: no divisor of 100 in 34..=100 below 50 is needed:
            // a = 4 gives 25.
            (100, 1, 32, (25, 4)),
            (48, 3, 8, (8, 2)),
        ] {
            let s = split(global, world, micro).expect("splits");
            assert_eq!((s.micro_batch, s.accumulation), want, "{global}/{world}");
            assert_eq!(s.micro_batch * s.accumulation * world, global);
            assert!(s.micro_batch <= micro);
        }
        assert_eq!(split(64, 3, 32), None, "3 does not divide 64");
        assert_eq!(split(64, 0, 32), None);
        // A share of 2048 at micro-batch 1 needs 2048 micro-batches.
        assert_eq!(split(2048, 1, 1), None);
    }

    fn config(optim: &str) -> TrainingConfig {
        TrainingConfig::from_toml(&format!(
            "[model]\nd_in = 4\n[optim]\nsteps = 1\n{optim}\n[data.synthetic]\nnum_samples = 4\n"
        ))
        .expect("valid")
    }

    #[test]
    fn a_config_is_written_for_its_largest_size() {
        let c = config("batch_size = 32");
        assert_eq!(c.global_batch_for(4), 128);
        assert_eq!(
            c.elastic_sizes(SizeRange { min: 2, max: 4 }),
            Ok(vec![2, 4])
        );
        let at2 = c.at_world_size(2, 4).expect("2 of 4");
        assert_eq!(
            (at2.optim.batch_size, at2.optim.accumulation_steps),
            (32, 2)
        );
        assert_eq!(at2.optim.global_batch, Some(128));
        assert_eq!(c.at_world_size(3, 4), None);
        assert_eq!(c.at_world_size(4, 4), Some(c.clone()), "as written");
    }

    #[test]
    fn a_range_no_size_of_which_splits_names_the_sizes_that_would() {
        let c = config("batch_size = 8\nglobal_batch = 96");
        let err = c
            .elastic_sizes(SizeRange { min: 5, max: 5 })
            .expect_err("5 does not divide 96");
        assert_eq!(err.would, vec![1, 2, 3, 4, 6, 8, 12, 16]);
        assert_eq!(
            err.to_string(),
            "the global batch 96 (micro-batches of at most 8) splits over none of 5..=5 ranks; \
             sizes that would: 1, 2, 3, 4, 6, 8, 12, 16"
        );
        assert_eq!(
            c.elastic_sizes(SizeRange { min: 5, max: 9 }),
            Ok(vec![6, 8]),
            "7 and 9 are skipped"
        );
    }
}
