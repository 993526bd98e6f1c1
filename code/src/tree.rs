//! Removing an unpacked tree, whose directories are read-only.

use std::fs::{self, Permissions};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Removes an unpacked (read-only) tree: makes its directories writable
/// first, never following symlinks. A `dir` that does not exist is no error;
/// a symlink or file at `dir` is removed itself.
pub fn remove_tree(dir: &Path) -> io::Result<()> {
    let meta = match fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        other => other?,
    };
    if !meta.is_dir() {
        return fs::remove_file(dir);
    }
    make_writable(dir, meta.permissions().mode())?;
    fs::remove_dir_all(dir)
}

/// Gives the owner full access to `dir` (whose mode is `mode`) and to every
/// directory below it.
fn make_writable(dir: &Path, mode: u32) -> io::Result<()> {
    if mode & 0o700 != 0o700 {
        fs::set_permissions(dir, Permissions::from_mode(mode | 0o700))?;
    }
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            let mode = entry.metadata()?.permissions().mode();
            make_writable(&entry.path(), mode)?;
        }
    }
    Ok(())
}
