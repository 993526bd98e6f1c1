//! Teams' own programs (`[program]` trainings): where they may run from
//! (`--program-root`), how each is launched, and its checkpoints.
//!
//! A program runs with a clean environment — the launch contract, PATH,
//! HOME and LANG, a private TMPDIR, the team's env file and its own
//! `[program.env]` — never the agent's (its credentials included).

pub mod checkpoints;
pub mod code;
pub mod frameworks;
mod lightning;
pub mod peer;
pub mod remote;
pub mod sandbox;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The `--program-root` directories (every team's) and the
/// `--team-program-root TEAM=DIR` ones (that team's only), resolved at
/// start-up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProgramRoots {
    shared: Vec<PathBuf>,
    teams: BTreeMap<String, Vec<PathBuf>>,
}

fn resolve_root(flag: &str, root: &Path) -> Result<PathBuf, String> {
    let real =
        std::fs::canonicalize(root).map_err(|e| format!("{flag} {}: {e}", root.display()))?;
    if !real.is_dir() {
        return Err(format!("{flag} {}: not a directory", root.display()));
    }
    Ok(real)
}

impl ProgramRoots {
    /// Resolves each root (it must exist and be a directory).
    pub fn resolve(shared: &[PathBuf], teams: &[(String, PathBuf)]) -> Result<Self, String> {
        let mut roots = Self::default();
        for root in shared {
            roots.shared.push(resolve_root("--program-root", root)?);
        }
        for (team, root) in teams {
            let real = resolve_root("--team-program-root", root)?;
            roots.teams.entry(team.clone()).or_default().push(real);
        }
        Ok(roots)
    }

    pub fn is_empty(&self) -> bool {
        self.shared.is_empty() && self.teams.is_empty()
    }

    /// The roots open to `team`'s programs: the shared ones and its own.
    pub fn for_team(&self, team: &str) -> Vec<PathBuf> {
        let mut roots = self.shared.clone();
        roots.extend(self.teams.get(team).into_iter().flatten().cloned());
        roots
    }

    /// The shared roots, as the agent registers them.
    pub fn to_strings(&self) -> Vec<String> {
        self.shared
            .iter()
            .map(|p| p.display().to_string())
            .collect()
    }

    /// The teams' roots, as the agent registers them: (team, root).
    pub fn team_strings(&self) -> Vec<(String, String)> {
        self.teams
            .iter()
            .flat_map(|(team, roots)| {
                roots
                    .iter()
                    .map(move |r| (team.clone(), r.display().to_string()))
            })
            .collect()
    }

    /// The working directory of `team`'s program with its links resolved,
    /// when it lies under a root open to the team; why not otherwise.
    pub fn check(&self, team: &str, working_dir: &str) -> Result<PathBuf, String> {
        let roots = self.for_team(team);
        if roots.is_empty() {
            return Err(format!(
                "PROGRAM_OUTSIDE_ROOTS: this agent has no --program-root open to team {team:?}"
            ));
        }
        let real = std::fs::canonicalize(working_dir)
            .map_err(|e| format!("program.working_dir {working_dir}: {e}"))?;
        if roots.iter().any(|root| real.starts_with(root)) {
            Ok(real)
        } else {
            Err(format!(
                "PROGRAM_OUTSIDE_ROOTS: program.working_dir {working_dir} ({}) lies under no --program-root of this agent open to team {team:?}",
                real.display()
            ))
        }
    }
}

/// The variables a program starts with before the launch contract's: the
/// agent's PATH and LANG (or plain defaults), its own HOME and TMPDIR.
pub fn base_env(home: &Path, tmp: &Path) -> Vec<(String, String)> {
    let var = |name: &str, default: &str| {
        std::env::var(name)
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| default.to_string())
    };
    vec![
        ("PATH".into(), var("PATH", "/usr/local/bin:/usr/bin:/bin")),
        ("LANG".into(), var("LANG", "C.UTF-8")),
        ("HOME".into(), home.display().to_string()),
        ("TMPDIR".into(), tmp.display().to_string()),
    ]
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // test set-up makes directories synchronously
mod tests {
    use super::*;

    #[test]
    fn a_working_dir_must_lie_under_a_root_after_links() {
        let base = tempfile::tempdir().unwrap();
        let root = base.path().join("team");
        let outside = base.path().join("other");
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
        let roots = ProgramRoots::resolve(std::slice::from_ref(&root), &[]).unwrap();
        let inside = roots
            .check("a", &root.join("src").display().to_string())
            .unwrap();
        assert!(inside.ends_with("team/src"));
        let err = roots
            .check("a", &root.join("escape").display().to_string())
            .unwrap_err();
        assert!(err.starts_with("PROGRAM_OUTSIDE_ROOTS"), "{err}");
        let err = ProgramRoots::default().check("a", "/").unwrap_err();
        assert!(err.contains("no --program-root"), "{err}");
        assert!(ProgramRoots::resolve(&[base.path().join("missing")], &[]).is_err());
        // A team's root is that team's only.
        let teams = ProgramRoots::resolve(&[], &[("vision".into(), root.clone())]).unwrap();
        assert!(teams
            .check("vision", &root.join("src").display().to_string())
            .is_ok());
        assert!(teams
            .check("nlp", &root.join("src").display().to_string())
            .is_err());
        let real = root.canonicalize().unwrap().display().to_string();
        assert_eq!(teams.team_strings(), [("vision".to_string(), real)]);
    }
}
