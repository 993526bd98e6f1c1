//! A directory as a program wrote it (a program's checkpoint): its files
//! listed, and one opened, without ever following a link out of it. The
//! agent's file server and the coordinator's download both read program
//! checkpoints through here.

use super::local::open_resolved;
use std::fs::File;
use std::io;
use std::path::{Component, Path};

/// The deepest a listing goes below its directory.
pub const MAX_DEPTH: usize = 16;

/// The regular files below `dir`, as `/`-separated paths relative to it,
/// sorted. Links (to files or directories) and special files are left out,
/// as are names that are not UTF-8; more than `max` files is an error.
pub fn list_files(dir: &Path, max: usize) -> io::Result<Vec<String>> {
    let mut found = Vec::new();
    walk(dir, "", 0, max, &mut found)?;
    found.sort();
    Ok(found)
}

fn walk(
    dir: &Path,
    prefix: &str,
    depth: usize,
    max: usize,
    found: &mut Vec<String>,
) -> io::Result<()> {
    if depth > MAX_DEPTH {
        return Err(io::Error::other(format!(
            "deeper than {MAX_DEPTH} directories"
        )));
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let kind = entry.file_type()?; // of the entry itself: a link stays a link
        let relative = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        if kind.is_dir() {
            walk(&entry.path(), &relative, depth + 1, max, found)?;
        } else if kind.is_file() {
            if found.len() == max {
                return Err(io::Error::other(format!("more than {max} files")));
            }
            found.push(relative);
        }
    }
    Ok(())
}

/// Whether `relative` names something below a directory: relative, every
/// component a plain name.
pub fn is_plain_relative(relative: &str) -> bool {
    !relative.is_empty()
        && Path::new(relative)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
}

/// Opens the regular file `relative` below `dir`, checked on what was
/// opened: its real path must lie below `dir`'s, so a link cannot lead out.
pub fn open_within(dir: &Path, relative: &str) -> io::Result<File> {
    if !is_plain_relative(relative) {
        return Err(io::Error::other(format!(
            "{relative:?} is not a plain relative path"
        )));
    }
    let root = dir.canonicalize()?;
    let (file, real) = open_resolved(&dir.join(relative))?;
    if !real.starts_with(&root) || !file.metadata()?.is_file() {
        return Err(io::Error::other(format!(
            "{relative} is not a file of {}",
            dir.display()
        )));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_below_without_links() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("step-10");
        std::fs::create_dir_all(dir.join("shards/a")).unwrap();
        std::fs::write(dir.join("model.pt"), b"m").unwrap();
        std::fs::write(dir.join("shards/a/0.bin"), b"s").unwrap();
        std::fs::write(tmp.path().join("secret"), b"no").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("secret"), dir.join("leak")).unwrap();
        std::os::unix::fs::symlink(tmp.path(), dir.join("up")).unwrap();
        assert_eq!(
            list_files(&dir, 10).unwrap(),
            ["model.pt", "shards/a/0.bin"]
        );
        assert!(list_files(&dir, 1).is_err(), "over the bound");
        assert!(open_within(&dir, "shards/a/0.bin").is_ok());
        for bad in ["leak", "up/secret", "../secret", "/etc/passwd", ""] {
            assert!(open_within(&dir, bad).is_err(), "{bad}");
        }
    }
}
