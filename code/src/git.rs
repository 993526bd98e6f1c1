//! Which commit a packed directory came from.

use std::path::Path;
use std::process::{Command, Stdio};

/// The git commit a directory is at, and whether it has local changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitState {
    /// HEAD's commit id (hex).
    pub commit: String,
    /// Whether `git status --porcelain -- .` in the directory lists anything
    /// (modified, staged or untracked, not ignored, files under it).
    pub dirty: bool,
}

/// When `root` lies in a git work tree (and the `git` program exists):
/// HEAD's commit and whether `git status --porcelain -- .` run in root lists
/// anything. `None` otherwise, also for a repository with no commits; never
/// an error.
pub fn git_state(root: &Path) -> Option<GitState> {
    let head = git(root, &["rev-parse", "--verify", "HEAD"])?;
    let commit = head.trim().to_owned();
    let is_id = matches!(commit.len(), 40 | 64) && commit.bytes().all(|b| b.is_ascii_hexdigit());
    if !is_id {
        return None;
    }
    let status = git(
        root,
        &[
            "status",
            "--porcelain",
            "--untracked-files=normal",
            "--",
            ".",
        ],
    )?;
    Some(GitState {
        commit,
        dirty: !status.trim().is_empty(),
    })
}

/// Runs `git -C root args`, returning its stdout when it succeeds.
fn git(root: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        // The directory alone decides which repository is asked.
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    String::from_utf8(output.stdout).ok()
}
