//! `[program] code`: the directory a program runs from, carried with the
//! training (docs/programs.md, "Code that travels").
//!
//! In a config file `code` is a path (relative to the file) that the client
//! packs and uploads; on the wire and in the database it is the snapshot the
//! upload made: its sha256, size and, when the directory was a git work
//! tree, its commit and whether it was dirty. The coordinator only ever
//! sees snapshots: a path reaching it is refused.

use crate::config::ConfigError;
use serde::{Deserialize, Serialize};

/// Where a program's code comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum CodeSource {
    /// A directory, relative to the config file: the client packs it.
    Path(String),
    /// An uploaded snapshot.
    Snapshot(CodeSnapshot),
}

/// An uploaded code snapshot: a content-addressed `.tar.gz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeSnapshot {
    /// The archive's sha256, 64 lowercase hex digits.
    pub sha256: String,
    /// The archive's size in bytes.
    pub size_bytes: u64,
    /// The files (and links) in it.
    #[serde(default)]
    pub files: u64,
    /// HEAD of the git work tree the directory was in, when it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_commit: Option<String>,
    /// Whether that work tree had changes `git status` showed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub git_dirty: bool,
}

/// Whether `s` is a sha256 as cohort writes it.
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn invalid(field: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.to_string(),
        reason: reason.into(),
    }
}

impl CodeSnapshot {
    /// The short form people read: `sha256:0123abcd4567`.
    pub fn short(&self) -> String {
        format!("sha256:{}", &self.sha256[..self.sha256.len().min(12)])
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if !is_sha256_hex(&self.sha256) {
            return Err(invalid(
                "program.code.sha256",
                "not a sha256 (64 lowercase hex digits)",
            ));
        }
        if self.size_bytes == 0 {
            return Err(invalid("program.code.size_bytes", "must be > 0"));
        }
        if let Some(commit) = &self.git_commit {
            let hex = commit
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
            if !(hex && (commit.len() == 40 || commit.len() == 64)) {
                return Err(invalid(
                    "program.code.git_commit",
                    "not a git commit id (40 or 64 lowercase hex digits)",
                ));
            }
        }
        Ok(())
    }
}

impl CodeSource {
    /// The snapshot, once uploaded.
    pub fn snapshot(&self) -> Option<&CodeSnapshot> {
        match self {
            CodeSource::Snapshot(s) => Some(s),
            CodeSource::Path(_) => None,
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        match self {
            CodeSource::Path(p) if p.trim().is_empty() || p.contains('\0') => Err(invalid(
                "program.code",
                "give the directory to pack, relative to the config file",
            )),
            CodeSource::Path(_) => Ok(()),
            CodeSource::Snapshot(s) => s.validate(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_or_a_snapshot_reads_from_toml() {
        #[derive(Deserialize)]
        struct T {
            code: CodeSource,
        }
        let t: T = toml::from_str("code = \"./src\"").unwrap();
        assert_eq!(t.code, CodeSource::Path("./src".into()));
        let sha = "ab".repeat(32);
        let t: T =
            toml::from_str(&format!("code = {{ sha256 = \"{sha}\", size_bytes = 10 }}")).unwrap();
        let snap = t.code.snapshot().unwrap();
        assert_eq!(snap.short(), "sha256:abababababab");
        assert!(t.code.validate().is_ok());
    }

    #[test]
    fn bad_snapshots_name_their_key() {
        let mut s = CodeSnapshot {
            sha256: "AB".repeat(32),
            size_bytes: 1,
            files: 1,
            git_commit: None,
            git_dirty: false,
        };
        assert_eq!(
            s.validate().unwrap_err().field(),
            Some("program.code.sha256")
        );
        s.sha256 = "ab".repeat(32);
        s.git_commit = Some("HEAD".into());
        assert_eq!(
            s.validate().unwrap_err().field(),
            Some("program.code.git_commit")
        );
        s.git_commit = Some("0".repeat(40));
        assert!(s.validate().is_ok());
        assert!(CodeSource::Path(" ".into()).validate().is_err());
    }
}
