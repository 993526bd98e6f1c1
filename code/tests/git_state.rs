//! git_state on a temporary repository.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use cohort_code::git_state;
use common::put;

fn have_git() -> bool {
    let found = Command::new("git")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        eprintln!("note: `git` is not on PATH; skipping the git_state test");
    }
    found
}

fn git(root: &Path, args: &[&str]) {
    let status = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "git {args:?}");
}

fn init_repo(root: &Path) {
    git(root, &["init", "-q"]);
    git(root, &["config", "user.name", "Cohort Test"]);
    git(root, &["config", "user.email", "test@example.com"]);
    git(root, &["config", "commit.gpgsign", "false"]);
}

#[test]
fn clean_then_dirty_repository() {
    if !have_git() {
        return;
    }
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    init_repo(root);
    assert_eq!(git_state(root), None, "a repository with no commits");

    put(root, ".gitignore", b"*.log\n");
    put(root, "code/train.py", b"print(1)\n");
    put(root, "other/notes.md", b"notes\n");
    git(root, &["add", "."]);
    git(root, &["commit", "-q", "-m", "first"]);

    let state = git_state(root).unwrap();
    assert!(matches!(state.commit.len(), 40 | 64), "{state:?}");
    assert!(state.commit.bytes().all(|b| b.is_ascii_hexdigit()));
    assert!(!state.dirty);
    let sub = root.join("code");
    assert_eq!(git_state(&sub), Some(state.clone()));

    put(root, "run.log", b"ignored\n");
    assert!(
        !git_state(root).unwrap().dirty,
        "an ignored file is not a change"
    );

    put(root, "other/notes.md", b"changed\n");
    assert!(git_state(root).unwrap().dirty);
    assert!(
        !git_state(&sub).unwrap().dirty,
        "changes outside root don't count"
    );

    put(root, "code/new.py", b"x\n");
    let dirty = git_state(&sub).unwrap();
    assert!(dirty.dirty, "an untracked file is a change");
    assert_eq!(dirty.commit, state.commit);
}

#[test]
fn outside_a_repository_is_none() {
    if !have_git() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    put(dir.path(), "a.py", b"a");
    assert_eq!(git_state(dir.path()), None);
    assert_eq!(git_state(&dir.path().join("missing")), None);
}
