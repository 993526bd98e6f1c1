//! Teams' own programs (`[program]` trainings): where they may run from
//! (`--program-root`), how each is launched, and its checkpoints.
//!
//! A program runs with a clean environment — the launch contract, PATH,
//! HOME and LANG, a private TMPDIR, the team's env file and its own
//! `[program.env]` — never the agent's (its credentials included).

pub mod checkpoints;
pub mod sandbox;

use std::path::{Path, PathBuf};

/// The `--program-root` directories, resolved at start-up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProgramRoots(Vec<PathBuf>);

impl ProgramRoots {
    /// Resolves each root (it must exist and be a directory).
    pub fn resolve(roots: &[PathBuf]) -> Result<Self, String> {
        let mut resolved = Vec::with_capacity(roots.len());
        for root in roots {
            let real = std::fs::canonicalize(root)
                .map_err(|e| format!("--program-root {}: {e}", root.display()))?;
            if !real.is_dir() {
                return Err(format!(
                    "--program-root {}: not a directory",
                    root.display()
                ));
            }
            resolved.push(real);
        }
        Ok(Self(resolved))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn paths(&self) -> &[PathBuf] {
        &self.0
    }

    /// As the agent registers them.
    pub fn to_strings(&self) -> Vec<String> {
        self.0.iter().map(|p| p.display().to_string()).collect()
    }

    /// The working directory with its links resolved, when it lies under
    /// a root; why not otherwise.
    pub fn check(&self, working_dir: &str) -> Result<PathBuf, String> {
        if self.0.is_empty() {
            return Err("PROGRAM_OUTSIDE_ROOTS: this agent has no --program-root".into());
        }
        let real = std::fs::canonicalize(working_dir)
            .map_err(|e| format!("program.working_dir {working_dir}: {e}"))?;
        if self.0.iter().any(|root| real.starts_with(root)) {
            Ok(real)
        } else {
            Err(format!(
                "PROGRAM_OUTSIDE_ROOTS: program.working_dir {working_dir} ({}) lies under no --program-root of this agent",
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
        let roots = ProgramRoots::resolve(std::slice::from_ref(&root)).unwrap();
        let inside = roots
            .check(&root.join("src").display().to_string())
            .unwrap();
        assert!(inside.ends_with("team/src"));
        let err = roots
            .check(&root.join("escape").display().to_string())
            .unwrap_err();
        assert!(err.starts_with("PROGRAM_OUTSIDE_ROOTS"), "{err}");
        let err = ProgramRoots::default().check("/").unwrap_err();
        assert!(err.contains("no --program-root"), "{err}");
        assert!(ProgramRoots::resolve(&[base.path().join("missing")]).is_err());
    }
}
