//! Packing: walk the directory (honouring ignore files), collect what goes
//! in, check it, then hand it to [`crate::write`] for the archive.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;

use ignore::WalkBuilder;

use crate::item::{Item, Kind, Packed};
use crate::paths::{link_stays_inside, MAX_PATH_BYTES};
use crate::CodeError;

/// Default cap on the packed directory's file contents: 64 MiB.
pub const DEFAULT_MAX_CONTENT_BYTES: u64 = 64 << 20;

/// The custom ignore file honoured next to `.gitignore`.
const COHORTIGNORE: &str = ".cohortignore";

/// Packs `root` into `out` as a deterministic `.tar.gz`; returns its digest
/// and counts.
///
/// The walk includes hidden files, honours `.gitignore` (also outside a git
/// repository, and in parent directories), `.git/info/exclude` and
/// `.cohortignore`, never `.ignore` or the global git excludes, skips `.git`
/// and does not follow symlinks. Fails with [`CodeError::TooLarge`] when the
/// regular files add up to more than `max_content_bytes`, and with
/// [`CodeError::SymlinkLeaves`] for a symlink that leaves the tree.
pub fn pack(root: &Path, max_content_bytes: u64, out: impl Write) -> Result<Packed, CodeError> {
    let meta = fs::metadata(root).map_err(|e| CodeError::io(root.display().to_string(), e))?;
    if !meta.is_dir() {
        return Err(CodeError::NotADirectory {
            path: root.display().to_string(),
        });
    }
    let mut items = collect(root)?;
    items.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
    check_size(&items, max_content_bytes)?;
    check_symlinks(&items)?;
    crate::write::write_archive(root, &items, out)
}

fn walker(root: &Path) -> ignore::Walk {
    let mut builder = WalkBuilder::new(root);
    builder
        .hidden(false)
        .ignore(false)
        .git_ignore(true)
        .git_global(false)
        .git_exclude(true)
        .require_git(false)
        .parents(true)
        .follow_links(false)
        .filter_entry(|e| e.depth() == 0 || e.file_name() != ".git");
    builder.add_custom_ignore_filename(COHORTIGNORE);
    builder.build()
}

fn collect(root: &Path) -> Result<Vec<Item>, CodeError> {
    let mut items = Vec::new();
    for entry in walker(root) {
        let entry = entry.map_err(|e| walk_error(root, e))?;
        if entry.depth() == 0 {
            continue;
        }
        let path = relative(root, entry.path())?;
        items.push(item(entry.path(), path)?);
    }
    Ok(items)
}

/// `path` relative to `root`, `/`-separated; non-UTF-8 or over-long names
/// are unsupported.
fn relative(root: &Path, path: &Path) -> Result<String, CodeError> {
    let rel = path.strip_prefix(root).unwrap_or(path);
    let unsupported = |kind| CodeError::Unsupported {
        path: rel.to_string_lossy().into_owned(),
        kind,
    };
    let mut parts = Vec::new();
    for component in rel.components() {
        let part = component.as_os_str().to_str();
        parts.push(part.ok_or_else(|| unsupported("file whose name is not UTF-8"))?);
    }
    let joined = parts.join("/");
    if joined.len() > MAX_PATH_BYTES {
        return Err(unsupported("file whose path is longer than 4096 bytes"));
    }
    Ok(joined)
}

fn item(full: &Path, path: String) -> Result<Item, CodeError> {
    let meta = fs::symlink_metadata(full).map_err(|e| CodeError::io(path.clone(), e))?;
    let ft = meta.file_type();
    let kind = if ft.is_dir() {
        Kind::Dir
    } else if ft.is_file() {
        let exec = meta.permissions().mode() & 0o111 != 0;
        Kind::File {
            size: meta.len(),
            exec,
        }
    } else if ft.is_symlink() {
        let target = fs::read_link(full).map_err(|e| CodeError::io(path.clone(), e))?;
        let target = target.into_os_string().into_string().map_err(|_| {
            let kind = "symlink whose target is not UTF-8";
            CodeError::Unsupported {
                path: path.clone(),
                kind,
            }
        })?;
        Kind::Symlink { target }
    } else {
        return Err(CodeError::Unsupported {
            path,
            kind: special_kind(ft),
        });
    };
    Ok(Item { path, kind })
}

fn special_kind(ft: fs::FileType) -> &'static str {
    if ft.is_socket() {
        "socket"
    } else if ft.is_fifo() {
        "fifo"
    } else if ft.is_block_device() {
        "block device"
    } else if ft.is_char_device() {
        "character device"
    } else {
        "special file"
    }
}

fn check_size(items: &[Item], cap: u64) -> Result<(), CodeError> {
    let mut files: Vec<(String, u64)> = items
        .iter()
        .filter_map(|item| match item.kind {
            Kind::File { size, .. } => Some((item.path.clone(), size)),
            _ => None,
        })
        .collect();
    let total = files
        .iter()
        .fold(0u64, |sum, (_, s)| sum.saturating_add(*s));
    if total <= cap {
        return Ok(());
    }
    files.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    files.truncate(5);
    Err(CodeError::TooLarge {
        cap,
        total,
        largest: files,
    })
}

fn check_symlinks(items: &[Item]) -> Result<(), CodeError> {
    for item in items {
        if let Kind::Symlink { target } = &item.kind {
            if !link_stays_inside(&item.path, target) {
                return Err(CodeError::SymlinkLeaves {
                    path: item.path.clone(),
                    target: target.clone(),
                });
            }
        }
    }
    Ok(())
}

fn walk_error(root: &Path, err: ignore::Error) -> CodeError {
    let path = error_path(&err)
        .map(|p| p.strip_prefix(root).unwrap_or(p).display().to_string())
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| root.display().to_string());
    let message = err.to_string();
    let source = err
        .into_io_error()
        .unwrap_or_else(|| std::io::Error::other(message));
    CodeError::io(path, source)
}

fn error_path(err: &ignore::Error) -> Option<&Path> {
    match err {
        ignore::Error::WithPath { path, .. } => Some(path),
        ignore::Error::WithDepth { err, .. } | ignore::Error::WithLineNumber { err, .. } => {
            error_path(err)
        }
        ignore::Error::Loop { child, .. } => Some(child),
        _ => None,
    }
}
