//! The roots check: every data and program root the agent was given exists,
//! is a directory and can be listed.

use super::{Check, Status};
use std::path::PathBuf;

/// A root and the flag that named it (`--data-root`, `--team-data-root a`, ...).
#[derive(Debug, Clone, PartialEq)]
pub struct Root {
    pub flag: String,
    pub path: PathBuf,
}

pub async fn check(roots: &[Root]) -> Check {
    if roots.is_empty() {
        return Check::new(
            "roots",
            Status::Skip,
            "no roots",
            "no --data-root, --team-data-root, --program-root or --team-program-root: nothing to check",
        );
    }
    let mut bad = Vec::new();
    for root in roots {
        let problem = match tokio::fs::metadata(&root.path).await {
            Err(e) => Some(format!("{e}")),
            Ok(m) if !m.is_dir() => Some("not a directory".to_string()),
            Ok(_) => tokio::fs::read_dir(&root.path)
                .await
                .err()
                .map(|e| format!("cannot be listed: {e}")),
        };
        if let Some(problem) = problem {
            bad.push(format!("{} {}: {problem}", root.flag, root.path.display()));
        }
    }
    let value = format!("{} root(s), {} unusable", roots.len(), bad.len());
    if bad.is_empty() {
        Check::new(
            "roots",
            Status::Pass,
            value,
            "every root exists and can be read",
        )
    } else {
        Check::new("roots", Status::Fail, value, bad.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn missing_roots_and_files_fail_directories_pass() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        tokio::fs::write(&file, b"x").await.unwrap();
        let root = |flag: &str, path: PathBuf| Root {
            flag: flag.into(),
            path,
        };
        assert_eq!(check(&[]).await.status, Status::Skip);
        let ok = check(&[root("--data-root", dir.path().into())]).await;
        assert_eq!(ok.status, Status::Pass, "{ok:?}");
        let bad = check(&[
            root("--data-root", dir.path().into()),
            root("--team-data-root a", dir.path().join("missing")),
            root("--program-root", file),
        ])
        .await;
        assert_eq!(bad.status, Status::Fail);
        assert_eq!(bad.value, "3 root(s), 2 unusable");
        assert!(bad.detail.contains("--team-data-root a"), "{}", bad.detail);
        assert!(bad.detail.contains("not a directory"), "{}", bad.detail);
    }
}
