//! What each team's ranks may reach on this host, and the environment they
//! get. Teams share hosts; the agent keeps them apart:
//!
//! - **Local paths**: `--data-root DIR` opens DIR to every team,
//!   `--team-data-root TEAM=DIR` to one. A training's local paths (data,
//!   validation, checkpoint storage) must lie under its team's roots or the
//!   shared ones; its own run dir always works. Once the agent has any
//!   root, a team with none may use no local path but its run dir. An agent
//!   with no roots at all limits nothing (and says so at start-up).
//! - **Object storage**: `--s3-prefix` and `--team-s3-prefix TEAM=URI`
//!   likewise, enforced by the rank per object.
//! - **Environment**: ranks never inherit the agent's environment (its
//!   AWS_* and other secrets): they get a short list of harmless variables
//!   ([`PASSED_THROUGH`]), then `--rank-env-file` (every rank), then
//!   `--team-env-file TEAM=FILE` (that team's), then the launch contract.

use cohort_spec::prefixes::S3Prefixes;
use cohort_spec::roots::DataRoots;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Variables of the agent's own environment a rank keeps: the locale, the
/// search path, where home is, and the host's tuning of its libraries and
/// interconnect (no credentials).
pub const PASSED_THROUGH: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "LD_LIBRARY_PATH",
    "RUST_LOG",
    "RUST_BACKTRACE",
    "NO_COLOR",
    "COHORT_GLOO_HOST",
];

/// Prefixes of passed-through variables: library and interconnect tuning.
pub const PASSED_THROUGH_PREFIXES: &[&str] = &[
    "LC_",
    "NCCL_",
    "GLOO_",
    "OMP_",
    "MKL_",
    "OPENBLAS_",
    "NVIDIA_",
    "CUDA_",
    // Fault injection for tests and drills (docs/rank.md).
    "COHORT_FAULT_",
];

/// The team flags as given on the command line.
#[derive(Debug, Clone, Default)]
pub struct TeamFlags {
    pub data_roots: Vec<PathBuf>,
    pub team_data_roots: Vec<(String, PathBuf)>,
    pub s3_prefixes: Vec<String>,
    pub team_s3_prefixes: Vec<(String, String)>,
    pub rank_env_file: Option<PathBuf>,
    pub team_env_files: Vec<(String, PathBuf)>,
}

/// Parses `TEAM=VALUE` (a flag's argument).
pub fn team_pair(arg: &str) -> Result<(String, String), String> {
    let (team, value) = arg
        .split_once('=')
        .ok_or_else(|| format!("{arg:?}: expected TEAM=VALUE"))?;
    if team.is_empty() || value.is_empty() {
        return Err(format!("{arg:?}: expected TEAM=VALUE"));
    }
    Ok((team.to_string(), value.to_string()))
}

/// The policy, loaded once at start-up.
#[derive(Debug, Clone, Default)]
pub struct TeamPolicy {
    shared_roots: Vec<PathBuf>,
    team_roots: BTreeMap<String, Vec<PathBuf>>,
    shared_s3: Vec<String>,
    team_s3: BTreeMap<String, Vec<String>>,
    rank_env: Vec<(String, String)>,
    team_env: BTreeMap<String, Vec<(String, String)>>,
}

impl TeamPolicy {
    /// Checks the roots exist and reads the environment files. Runs once
    /// at start-up, before any session.
    #[allow(clippy::disallowed_methods)]
    pub fn load(flags: &TeamFlags) -> Result<Self, String> {
        let canonical = |dir: &Path| {
            std::fs::canonicalize(dir).map_err(|e| format!("data root {}: {e}", dir.display()))
        };
        let read_env = |file: &Path| -> Result<Vec<(String, String)>, String> {
            let text = std::fs::read_to_string(file)
                .map_err(|e| format!("env file {}: {e}", file.display()))?;
            cohort_spec::envfile::parse(&text)
                .map_err(|e| format!("env file {}: {e}", file.display()))
        };
        let mut policy = Self {
            shared_roots: flags
                .data_roots
                .iter()
                .map(|d| canonical(d))
                .collect::<Result<_, _>>()?,
            ..Self::default()
        };
        for (team, dir) in &flags.team_data_roots {
            let dir = canonical(dir)?;
            policy.team_roots.entry(team.clone()).or_default().push(dir);
        }
        S3Prefixes::only(&flags.s3_prefixes)?;
        policy.shared_s3 = flags.s3_prefixes.clone();
        for (team, uri) in &flags.team_s3_prefixes {
            S3Prefixes::only(std::slice::from_ref(uri))?;
            policy
                .team_s3
                .entry(team.clone())
                .or_default()
                .push(uri.clone());
        }
        if let Some(file) = &flags.rank_env_file {
            policy.rank_env = read_env(file)?;
        }
        for (team, file) in &flags.team_env_files {
            if policy.team_env.contains_key(team) {
                return Err(format!("--team-env-file: team {team} is given twice"));
            }
            policy.team_env.insert(team.clone(), read_env(file)?);
        }
        Ok(policy)
    }

    /// Whether local paths are limited at all (any root was given).
    pub fn confines_paths(&self) -> bool {
        !self.shared_roots.is_empty() || !self.team_roots.is_empty()
    }

    /// Whether object storage is limited at all (any prefix was given).
    pub fn confines_s3(&self) -> bool {
        !self.shared_s3.is_empty() || !self.team_s3.is_empty()
    }

    /// The local roots open to `team`'s training whose run dir is
    /// `run_dir` (which must exist): the shared roots, the team's, and the
    /// run dir. Empty (no limit) when the agent has no roots at all.
    pub fn roots(&self, team: &str, run_dir: &Path) -> Result<DataRoots, String> {
        if !self.confines_paths() {
            return Ok(DataRoots::default());
        }
        let mut roots = self.shared_roots.clone();
        roots.extend(self.team_roots.get(team).into_iter().flatten().cloned());
        roots.push(run_dir.to_path_buf());
        DataRoots::new(&roots)
    }

    /// The object-storage prefixes open to `team`.
    pub fn s3_prefixes(&self, team: &str) -> S3Prefixes {
        if !self.confines_s3() {
            return S3Prefixes::open();
        }
        let mut uris = self.shared_s3.clone();
        uris.extend(self.team_s3.get(team).into_iter().flatten().cloned());
        S3Prefixes::only(&uris).unwrap_or_else(|_| {
            // Checked at load: cannot happen; refuse everything rather than open it.
            S3Prefixes::only(&[]).expect("an empty list parses")
        })
    }

    /// What a rank of `team` starts with, before the launch contract's
    /// variables: the passed-through variables of `agent_env`, then the
    /// rank env file, then the team's.
    pub fn rank_env(
        &self,
        team: &str,
        agent_env: impl Iterator<Item = (String, String)>,
    ) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = agent_env
            .filter(|(k, _)| {
                PASSED_THROUGH.contains(&k.as_str())
                    || PASSED_THROUGH_PREFIXES.iter().any(|p| k.starts_with(p))
            })
            .collect();
        let files = self
            .rank_env
            .iter()
            .chain(self.team_env.get(team).into_iter().flatten());
        for (k, v) in files {
            env.retain(|(name, _)| name != k);
            env.push((k.clone(), v.clone()));
        }
        env
    }

    /// One line for the start-up log.
    pub fn describe(&self) -> String {
        let teams: Vec<&String> = self
            .team_roots
            .keys()
            .chain(self.team_s3.keys())
            .chain(self.team_env.keys())
            .collect();
        format!(
            "{} shared root(s), {} shared S3 prefix(es), teams with their own: {:?}, rank env file: {} variable(s)",
            self.shared_roots.len(),
            self.shared_s3.len(),
            teams,
            self.rank_env.len()
        )
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // test set-up writes files synchronously
mod tests {
    use super::*;

    fn env_file(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn each_team_gets_the_shared_roots_its_own_and_its_run_dir() {
        let dir = tempfile::tempdir().unwrap();
        for d in ["shared", "a", "b", "run"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        let flags = TeamFlags {
            data_roots: vec![dir.path().join("shared")],
            team_data_roots: vec![
                ("a".into(), dir.path().join("a")),
                ("b".into(), dir.path().join("b")),
            ],
            ..Default::default()
        };
        let policy = TeamPolicy::load(&flags).unwrap();
        let run = dir.path().join("run");
        let base = Path::new("/");
        let at = |p: &str| dir.path().join(p).display().to_string();
        let a = policy.roots("a", &run).unwrap();
        assert!(a.check(&at("a/x.npy"), base).is_ok());
        assert!(a.check(&at("shared/x.npy"), base).is_ok());
        assert!(a.check(&at("run/ckpt"), base).is_ok());
        assert!(
            a.check(&at("b/x.npy"), base).is_err(),
            "b's root is not a's"
        );
        let other = policy.roots("c", &run).unwrap();
        assert!(other.check(&at("shared/x.npy"), base).is_ok());
        assert!(other.check(&at("a/x.npy"), base).is_err());

        // Team roots alone: a team with none may use its run dir only.
        let only_teams = TeamPolicy::load(&TeamFlags {
            team_data_roots: vec![("a".into(), dir.path().join("a"))],
            ..Default::default()
        })
        .unwrap();
        let c = only_teams.roots("c", &run).unwrap();
        assert!(c.check(&at("shared/x.npy"), base).is_err());
        assert!(c.check(&at("run/x"), base).is_ok());
        // No roots at all: no limit.
        let open = TeamPolicy::default();
        assert!(open.roots("a", &run).unwrap().is_empty());
        assert!(open.s3_prefixes("a").is_open());
    }

    #[test]
    fn ranks_get_a_clean_environment_with_their_team_files() {
        let dir = tempfile::tempdir().unwrap();
        let flags = TeamFlags {
            rank_env_file: Some(env_file(
                dir.path(),
                "all.env",
                "SHARED=1\nAWS_REGION=eu-west-1\n",
            )),
            team_env_files: vec![(
                "a".into(),
                env_file(
                    dir.path(),
                    "a.env",
                    "AWS_ACCESS_KEY_ID=team-a\nAWS_REGION=us-east-1\n",
                ),
            )],
            s3_prefixes: vec!["s3://shared/".into()],
            team_s3_prefixes: vec![("a".into(), "s3://bucket/a".into())],
            ..Default::default()
        };
        let policy = TeamPolicy::load(&flags).unwrap();
        let agent_env = || {
            [
                ("PATH", "/usr/bin"),
                ("AWS_SECRET_ACCESS_KEY", "the agent's own"),
                ("NCCL_SOCKET_IFNAME", "eth0"),
                ("DATABASE_URL", "postgres://secret"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
        };
        let a: BTreeMap<String, String> = policy.rank_env("a", agent_env()).into_iter().collect();
        assert_eq!(a.get("PATH").map(String::as_str), Some("/usr/bin"));
        assert_eq!(
            a.get("NCCL_SOCKET_IFNAME").map(String::as_str),
            Some("eth0")
        );
        assert_eq!(
            a.get("AWS_ACCESS_KEY_ID").map(String::as_str),
            Some("team-a")
        );
        assert_eq!(
            a.get("AWS_REGION").map(String::as_str),
            Some("us-east-1"),
            "the team's file wins"
        );
        assert_eq!(a.get("SHARED").map(String::as_str), Some("1"));
        assert!(!a.contains_key("AWS_SECRET_ACCESS_KEY") && !a.contains_key("DATABASE_URL"));
        let b: BTreeMap<String, String> = policy.rank_env("b", agent_env()).into_iter().collect();
        assert!(
            !b.contains_key("AWS_ACCESS_KEY_ID"),
            "a's credentials are a's"
        );
        assert_eq!(b.get("AWS_REGION").map(String::as_str), Some("eu-west-1"));

        assert!(policy.s3_prefixes("a").check("bucket", "a/x").is_ok());
        assert!(policy.s3_prefixes("b").check("bucket", "a/x").is_err());
        assert!(policy.s3_prefixes("b").check("shared", "x").is_ok());
    }

    #[test]
    fn bad_flags_are_refused() {
        assert!(team_pair("a=/x").is_ok());
        for bad in ["a", "=x", "a="] {
            assert!(team_pair(bad).is_err(), "{bad}");
        }
        let missing = TeamFlags {
            data_roots: vec!["/no/such/root".into()],
            ..Default::default()
        };
        assert!(TeamPolicy::load(&missing)
            .unwrap_err()
            .contains("/no/such/root"));
        let bad_s3 = TeamFlags {
            team_s3_prefixes: vec![("a".into(), "gs://x".into())],
            ..Default::default()
        };
        assert!(TeamPolicy::load(&bad_s3).is_err());
    }
}
