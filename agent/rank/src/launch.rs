//! The rank's identity, read torchrun-style from the environment.

use crate::error::RankError;

#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    pub rank: i64,
    pub world_size: i64,
    pub local_rank: i64,
    pub local_world_size: i64,
    pub master_addr: String,
    pub master_port: u16,
    /// The attempt (`COHORT_ATTEMPT`, set by the agent); written into each
    /// checkpoint's manifest.
    pub attempt: Option<i64>,
    /// The checkpoints of earlier attempts this one may resume from
    /// (`COHORT_PUBLISHED_CHECKPOINTS`); `None` when run by hand.
    pub published: Option<cohort_spec::resume::Published>,
}

impl Launch {
    pub fn from_env() -> Result<Self, RankError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Parse from any key lookup (the environment in production, a map in tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, RankError> {
        let int = |key: &str, default: Option<i64>| -> Result<i64, RankError> {
            match get(key) {
                Some(v) => v
                    .trim()
                    .parse::<i64>()
                    .map_err(|_| RankError::Launch(format!("{key}={v:?} is not an integer"))),
                None => default.ok_or_else(|| RankError::Launch(format!("{key} is not set"))),
            }
        };
        let world_size = int("WORLD_SIZE", Some(1))?;
        let rank = int("RANK", Some(0))?;
        let local_rank = int("LOCAL_RANK", Some(rank))?;
        let local_world_size = int("LOCAL_WORLD_SIZE", Some(world_size))?;
        if world_size < 1 {
            return Err(RankError::Launch(format!(
                "WORLD_SIZE={world_size} must be >= 1"
            )));
        }
        if !(0..world_size).contains(&rank) {
            return Err(RankError::Launch(format!(
                "RANK={rank} must be in 0..WORLD_SIZE ({world_size})"
            )));
        }
        if local_world_size < 1 || local_world_size > world_size {
            return Err(RankError::Launch(format!(
                "LOCAL_WORLD_SIZE={local_world_size} must be in 1..=WORLD_SIZE ({world_size})"
            )));
        }
        if !(0..local_world_size).contains(&local_rank) {
            return Err(RankError::Launch(format!(
                "LOCAL_RANK={local_rank} must be in 0..LOCAL_WORLD_SIZE ({local_world_size})"
            )));
        }
        let master_addr = get("MASTER_ADDR").unwrap_or_else(|| "127.0.0.1".to_string());
        if master_addr.trim().is_empty() {
            return Err(RankError::Launch("MASTER_ADDR is empty".into()));
        }
        let port = int("MASTER_PORT", Some(29500))?;
        let master_port = u16::try_from(port)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| RankError::Launch(format!("MASTER_PORT={port} is not a port")))?;
        let attempt = match get("COHORT_ATTEMPT") {
            Some(_) => Some(int("COHORT_ATTEMPT", None)?),
            None => None,
        };
        let published = get(cohort_spec::resume::PUBLISHED_ENV)
            .map(|v| cohort_spec::resume::Published::parse(&v))
            .transpose()
            .map_err(|e| {
                RankError::Launch(format!("{}: {e}", cohort_spec::resume::PUBLISHED_ENV))
            })?;
        Ok(Self {
            rank,
            world_size,
            local_rank,
            local_world_size,
            master_addr,
            master_port,
            attempt,
            published,
        })
    }

    pub fn is_leader(&self) -> bool {
        self.rank == 0
    }

    /// Torch intra-op threads: the host's cores shared by the ranks on it.
    pub fn torch_threads(&self) -> i32 {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as i64;
        (cores / self.local_world_size).max(1) as i32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn launch(pairs: &[(&str, &str)]) -> Result<Launch, RankError> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Launch::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_to_a_single_rank() {
        let l = launch(&[]).unwrap();
        assert_eq!((l.rank, l.world_size, l.master_port), (0, 1, 29500));
    }

    #[test]
    fn rejects_bad_identities() {
        for pairs in [
            vec![("WORLD_SIZE", "0")],
            vec![("WORLD_SIZE", "2"), ("RANK", "2")],
            vec![("WORLD_SIZE", "2"), ("RANK", "-1")],
            vec![("WORLD_SIZE", "x")],
            vec![("MASTER_PORT", "70000")],
            vec![("WORLD_SIZE", "2"), ("LOCAL_WORLD_SIZE", "3")],
        ] {
            assert!(
                matches!(launch(&pairs), Err(RankError::Launch(_))),
                "{pairs:?}"
            );
        }
    }
}
