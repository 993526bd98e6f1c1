use std::path::PathBuf;

use thiserror::Error;

use super::RankKey;

#[derive(Debug, Error)]
pub enum SupervisorError {
    #[error("rank program {0} does not exist; build cohort-rank next to cohort-agent or pass --rank-binary")]
    ProgramNotFound(PathBuf),
    #[error("could not start rank program {program}: {source}")]
    Spawn {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot confine the program: {0}")]
    Sandbox(String),
    #[error("rank {0} is already running")]
    AlreadyRunning(RankKey),
    #[error("rank {0} is not known to this agent")]
    NotFound(RankKey),
}
