//! Data roots: the directories an agent lets trainings read and write
//! (`cohort-agent --data-root DIR`, repeatable). The agent checks a
//! training's local paths before any rank starts; each rank checks every
//! file it opens after its globs and directories are expanded, with
//! symbolic links resolved, so neither `..` nor a link leads outside.
//! Object storage (`s3://`) is not a local path and is not limited here.

use crate::location::Location;
use crate::TrainingConfig;
use std::path::{Component, Path, PathBuf};

/// The environment variable that hands the roots to ranks (one per line).
pub const ENV: &str = "COHORT_DATA_ROOTS";

/// The roots, canonical; empty: no limit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DataRoots {
    roots: Vec<PathBuf>,
}

impl DataRoots {
    /// Each root must exist (it is resolved to its canonical path).
    pub fn new(roots: &[PathBuf]) -> Result<Self, String> {
        let roots = roots
            .iter()
            .map(|r| {
                std::fs::canonicalize(r).map_err(|e| format!("data root {}: {e}", r.display()))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { roots })
    }

    /// The roots a rank was given (`COHORT_DATA_ROOTS`); none: no limit.
    pub fn from_env() -> Result<Self, String> {
        match std::env::var_os(ENV) {
            None => Ok(Self::default()),
            Some(v) => {
                let text = v.to_string_lossy().into_owned();
                let roots: Vec<PathBuf> = text
                    .lines()
                    .filter(|l| !l.is_empty())
                    .map(PathBuf::from)
                    .collect();
                Self::new(&roots)
            }
        }
    }

    /// The value of [`ENV`] for a rank.
    pub fn to_env(&self) -> String {
        self.roots
            .iter()
            .map(|r| r.display().to_string())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The roots, resolved.
    pub fn paths(&self) -> &[PathBuf] {
        &self.roots
    }

    pub fn is_empty(&self) -> bool {
        self.roots.is_empty()
    }

    /// `Ok` when `path` (relative ones against `base`) lies under a root
    /// once `..` and symbolic links are resolved; else why not, naming it.
    /// A glob pattern is checked by its literal directory part.
    pub fn check(&self, path: &str, base: &Path) -> Result<(), String> {
        if self.roots.is_empty() {
            return Ok(());
        }
        let literal = match path.find(['*', '?', '[', '{']) {
            Some(i) => &path[..i],
            None => path,
        };
        let resolved = resolve(&base.join(literal));
        if self.roots.iter().any(|r| resolved.starts_with(r)) {
            return Ok(());
        }
        Err(format!(
            "{path} lies outside every data root of this agent ({})",
            self.roots
                .iter()
                .map(|r| r.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }

    /// The first of a config's local paths (data, validation, checkpoint
    /// storage) that lies outside the roots, and why.
    pub fn check_config(&self, config: &TrainingConfig, base: &Path) -> Result<(), String> {
        for path in local_paths(config) {
            self.check(&path, base)?;
        }
        Ok(())
    }
}

/// The paths of a config that name the local file system (`file://`
/// stripped; `s3://` left out).
pub fn local_paths(config: &TrainingConfig) -> Vec<String> {
    locations(config)
        .filter_map(|p| match Location::parse(p) {
            Ok(Location::Local(path)) => Some(path.to_string_lossy().into_owned()),
            // An invalid entry is refused by validation; none is a path.
            _ => None,
        })
        .collect()
}

/// Every location a config names: data and validation entries, then the
/// checkpoint storage.
pub fn locations(config: &TrainingConfig) -> impl Iterator<Item = &String> {
    let data = config.data.files.iter().flat_map(|f| f.paths.iter());
    let validation = config.validation.iter().flat_map(|v| v.paths.iter());
    data.chain(validation)
        .chain(config.checkpoint.storage.iter())
}

/// `path` made absolute with `..` and `.` removed, then its longest
/// existing ancestor replaced by its canonical path (links resolved).
fn resolve(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut lexical = PathBuf::new();
    for c in absolute.components() {
        match c {
            Component::ParentDir => {
                lexical.pop();
            }
            Component::CurDir => {}
            other => lexical.push(other),
        }
    }
    let mut existing = lexical.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            return rest.iter().rev().fold(real, |p, part| p.join(part));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                existing = parent;
            }
            _ => return lexical,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_inside_pass_and_dot_dot_links_and_neighbours_do_not() {
        let dir = std::env::temp_dir().join(format!("cohort-roots-{}", std::process::id()));
        let root = dir.join("data");
        let outside = dir.join("secret");
        std::fs::create_dir_all(root.join("acts")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::create_dir_all(dir.join("database")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        let roots = DataRoots::new(std::slice::from_ref(&root)).unwrap();
        let base = Path::new("/");
        let at = |p: &Path| p.display().to_string();
        assert!(roots.check(&at(&root.join("acts/a.npy")), base).is_ok());
        assert!(roots.check(&at(&root.join("acts/*.npy")), base).is_ok());
        assert!(roots.check(&at(&root.join("not-yet/ckpt")), base).is_ok());
        assert!(
            roots.check("acts/x.npy", &root).is_ok(),
            "relative to the base"
        );
        for bad in [
            at(&root.join("../secret/x.npy")),
            at(&root.join("link/x.npy")),
            at(&dir.join("database/x.npy")),
            "/etc/passwd".to_string(),
        ] {
            let err = roots.check(&bad, base).unwrap_err();
            assert!(
                err.starts_with(&bad) && err.contains("outside every data root"),
                "{err}"
            );
        }
        assert!(DataRoots::default().check("/etc/passwd", base).is_ok());
        let env = roots.to_env();
        assert_eq!(
            env,
            std::fs::canonicalize(&root).unwrap().display().to_string()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_config_names_its_data_validation_and_storage_paths_but_not_s3() {
        let config = TrainingConfig::from_toml(
            "[model]\nd_in = 4\n[optim]\nbatch_size = 1\nsteps = 1\n\
             [data.files]\npaths = [\"file:///d/a.npy\", \"s3://b/k\"]\n\
             [validation]\npaths = [\"/v/*.npy\"]\n[checkpoint]\nstorage = \"/ckpt\"\n",
        )
        .unwrap();
        assert_eq!(local_paths(&config), ["/d/a.npy", "/v/*.npy", "/ckpt"]);
    }
}
