//! Which GPUs a training asked for, as stored with the training (JSON).

use cohort_spec::elastic::SizeRange;
use cohort_spec::{TrainingConfig, Workload};
use serde::{Deserialize, Serialize};

/// How the GPUs are chosen.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GpuSelection {
    /// As many free GPUs as fit, at most `max_gpus` (0: no bound).
    Auto { max_gpus: u32 },
    /// This many GPUs, chosen by the coordinator.
    Count { count: u32 },
    /// Exactly these GPU uuids, in rank order.
    Ids { ids: Vec<String> },
    /// An elastic training: any of `sizes` (ascending, the world sizes of
    /// `min..=max` that split its global batch), the largest that fits.
    Range { min: u32, max: u32, sizes: Vec<u32> },
}

impl GpuSelection {
    /// The largest of a range's sizes at most `available`; None below its
    /// smallest.
    pub fn largest_size(sizes: &[u32], available: usize) -> Option<usize> {
        sizes
            .iter()
            .rev()
            .map(|&s| s as usize)
            .find(|&s| s <= available)
    }

    /// Whether the training may run at more than one size.
    pub fn is_elastic(&self) -> bool {
        matches!(self, GpuSelection::Range { .. })
    }

    /// A range held at `world`, the size it ran at (a training that may
    /// not be resized keeps its first size); anything else as it is.
    pub fn pin(&mut self, world: u32) {
        if let GpuSelection::Range { sizes, .. } = self {
            if sizes.contains(&world) {
                *sizes = vec![world];
            }
        }
    }

    /// The smallest and largest world size it may run at (a fixed
    /// selection: `world`, the size it runs at).
    pub fn world_sizes(&self, world: u32) -> (u32, u32) {
        match self {
            GpuSelection::Range { min, max, sizes } => (
                sizes.first().copied().unwrap_or(*min),
                sizes.last().copied().unwrap_or(*max),
            ),
            _ => (world, world),
        }
    }
}

/// A training's GPU request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuRequest {
    pub selection: GpuSelection,
    /// Queue the training when the GPUs are not free now (else fail at once).
    pub queue: bool,
}

impl Default for GpuRequest {
    fn default() -> Self {
        Self {
            selection: GpuSelection::Auto { max_gpus: 0 },
            queue: true,
        }
    }
}

/// A malformed GPU request, naming its field in the CreateTraining request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct InvalidGpuRequest {
    pub field: &'static str,
    pub reason: String,
}

impl GpuRequest {
    /// The request as `workload` can run it: a range narrowed to the sizes
    /// that split the SAE's global batch (every size for a program), and a
    /// fixed size checked against `optim.global_batch`.
    pub fn for_workload(mut self, workload: &Workload) -> Result<Self, InvalidGpuRequest> {
        let config = match workload {
            Workload::Sae(config) => config,
            Workload::Program(p) => {
                if let GpuSelection::Range { min, max, sizes } = &mut self.selection {
                    let found =
                        p.elastic_sizes(i64::from(*min), i64::from(*max))
                            .map_err(|reason| InvalidGpuRequest {
                                field: "gpus.min_count",
                                reason,
                            })?;
                    *sizes = found.into_iter().map(|s| s as u32).collect();
                }
                return Ok(self);
            }
        };
        let fixed = match &mut self.selection {
            GpuSelection::Range { min, max, sizes } => {
                let range = SizeRange {
                    min: *min as i64,
                    max: *max as i64,
                };
                let found = config.elastic_sizes(range).map_err(|e| InvalidGpuRequest {
                    field: "gpus.min_count",
                    reason: e.to_string(),
                })?;
                *sizes = found.into_iter().map(|s| s as u32).collect();
                return Ok(self);
            }
            GpuSelection::Count { count } => *count as i64,
            GpuSelection::Ids { ids } => ids.len() as i64,
            GpuSelection::Auto { .. } => {
                if config.optim.global_batch.is_some() {
                    return Err(InvalidGpuRequest {
                        field: "optim.global_batch",
                        reason: "a global batch is held over a GPU count or range: give \
                                 gpus.count or gpus.min_count and gpus.max_count"
                            .to_string(),
                    });
                }
                return Ok(self);
            }
        };
        fixed_size(config, fixed)?;
        Ok(self)
    }
}

/// A fixed size's check: it must split `optim.global_batch` when one is given.
fn fixed_size(config: &TrainingConfig, world: i64) -> Result<(), InvalidGpuRequest> {
    if config.optim.global_batch.is_none() {
        return Ok(());
    }
    let range = SizeRange {
        min: world,
        max: world,
    };
    config
        .elastic_sizes(range)
        .map(|_| ())
        .map_err(|e| InvalidGpuRequest {
            field: "optim.global_batch",
            reason: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sae(optim: &str) -> Workload {
        Workload::Sae(
            TrainingConfig::from_toml(&format!(
                "[model]\nd_in = 4\n[optim]\nsteps = 1\n{optim}\n[data.synthetic]\nnum_samples = 4\n"
            ))
            .expect("valid"),
        )
    }

    fn request(selection: GpuSelection) -> GpuRequest {
        GpuRequest {
            selection,
            queue: true,
        }
    }

    #[test]
    fn a_range_keeps_the_sizes_that_split_the_global_batch() {
        let range = request(GpuSelection::Range {
            min: 2,
            max: 8,
            sizes: (2..=8).collect(),
        });
        let fitted = range.clone().for_workload(&sae("batch_size = 6")).unwrap();
        // 6 x 8 = 48: 2, 3, 4, 6 and 8 divide it.
        assert_eq!(
            fitted.selection,
            GpuSelection::Range {
                min: 2,
                max: 8,
                sizes: vec![2, 3, 4, 6, 8]
            }
        );
        let err = request(GpuSelection::Range {
            min: 5,
            max: 5,
            sizes: vec![5],
        })
        .for_workload(&sae("batch_size = 8\nglobal_batch = 96"))
        .unwrap_err();
        assert_eq!(err.field, "gpus.min_count");
        assert!(
            err.reason
                .ends_with("sizes that would: 1, 2, 3, 4, 6, 8, 12, 16"),
            "{}",
            err.reason
        );
    }

    #[test]
    fn a_global_batch_needs_a_size_that_splits_it() {
        let config = sae("batch_size = 8\nglobal_batch = 96");
        assert!(request(GpuSelection::Count { count: 4 })
            .for_workload(&config)
            .is_ok());
        let err = request(GpuSelection::Count { count: 5 })
            .for_workload(&config)
            .unwrap_err();
        assert_eq!(err.field, "optim.global_batch");
        let err = GpuRequest::default().for_workload(&config).unwrap_err();
        assert_eq!(err.field, "optim.global_batch");
        assert!(GpuRequest::default()
            .for_workload(&sae("batch_size = 8"))
            .is_ok());
    }

    #[test]
    fn a_program_range_keeps_the_sizes_that_divide_its_global_batch() {
        let program = |extra: &str| {
            Workload::from_toml(&format!(
                "[program]\ncommand = [\"/usr/bin/python3\"]\nworking_dir = \"/srv\"\n\
                 memory_gib_per_rank = 1\n{extra}"
            ))
            .expect("valid")
        };
        let range = |min, max| {
            request(GpuSelection::Range {
                min,
                max,
                sizes: (min..=max).collect(),
            })
        };
        let fitted = range(2, 8)
            .for_workload(&program("elastic = true\nglobal_batch = 24"))
            .unwrap();
        assert_eq!(fitted.selection.world_sizes(0), (2, 8));
        assert_eq!(
            fitted.selection,
            GpuSelection::Range {
                min: 2,
                max: 8,
                sizes: vec![2, 3, 4, 6, 8]
            }
        );
        let err = range(5, 5)
            .for_workload(&program("global_batch = 24"))
            .unwrap_err();
        assert_eq!(err.field, "gpus.min_count");
        // Without a global batch every size of the range runs.
        let all = range(3, 5).for_workload(&program("")).unwrap();
        assert_eq!(all.selection.world_sizes(0), (3, 5));
        // A training that may not be resized keeps the size it ran at.
        let mut pinned = all.selection.clone();
        pinned.pin(4);
        assert_eq!(pinned.world_sizes(0), (4, 4));
        let mut fixed = GpuSelection::Count { count: 2 };
        fixed.pin(4);
        assert_eq!(fixed, GpuSelection::Count { count: 2 });
    }
}
