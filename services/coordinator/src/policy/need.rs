//! What a training needs of the fleet to be placed: the memory of a rank
//! on its GPU, and for a program the agents that may run it.

use cohort_spec::Workload;

/// What one training needs of the fleet.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Need {
    /// Bytes per GPU of a first placement.
    pub memory: u64,
    /// A program's working directory: only agents with a program root
    /// holding it may run it. None for a program that carries its code
    /// (any agent fetches the snapshot).
    pub program_dir: Option<String>,
}

impl Need {
    pub fn of(config: &Workload) -> Self {
        use crate::selection::{estimate, EstimateInput};
        match config {
            Workload::Sae(sae) => Need {
                memory: estimate(&EstimateInput::from_config(sae)).total,
                program_dir: None,
            },
            Workload::Program(p) => Need {
                memory: p.memory_bytes_per_rank(),
                program_dir: p
                    .snapshot()
                    .is_none()
                    .then(|| p.program.working_dir.clone()),
            },
        }
    }
}
