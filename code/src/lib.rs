//! A training's code snapshot.
//!
//! The CLI [`pack`]s a directory into a deterministic, content-addressed
//! `.tar.gz`: the walk honours `.gitignore` (even outside a git repository),
//! `.git/info/exclude` and `.cohortignore`, skips `.git`, and writes every
//! header with fixed metadata (mtime 0, uid/gid 0, no owner names, modes
//! reduced to 0o755/0o644), so the same tree always gives the same bytes and
//! the same [`Packed::sha256`]. Agents download the archive by that hash and
//! [`unpack`] it: the input is untrusted, so every entry is confined to the
//! destination, its size and count are bounded by [`UnpackLimits`], and the
//! finished tree is made read-only ([`remove_tree`] removes it again).
//! [`git_state`] records which commit the directory came from.
//!
//! The crate targets Unix hosts (it reads and sets Unix permission bits and
//! creates symlinks).

mod digest;
mod git;
mod item;
mod layout;
mod pack;
mod paths;
mod stream;
mod tree;
mod unpack;
mod write;

use std::fmt::Write as _;

pub use digest::{is_sha256_hex, sha256_hex, Digest};
pub use git::{git_state, GitState};
pub use item::Packed;
pub use pack::{pack, DEFAULT_MAX_CONTENT_BYTES};
pub use tree::remove_tree;
pub use unpack::{unpack, UnpackLimits, Unpacked, MAX_UNPACK_ENTRIES};

/// Why packing or unpacking a code snapshot failed.
///
/// Messages are user-facing; paths are relative to the packed root (or to
/// the unpack destination). [`CodeError::reason`] gives a stable token.
#[derive(Debug, thiserror::Error)]
pub enum CodeError {
    /// The directory to pack is not a directory.
    #[error("{path} is not a directory, so it cannot be packed as a training's code")]
    NotADirectory {
        /// The path given to pack.
        path: String,
    },
    /// The files to pack add up to more than the cap.
    #[error("{}", too_large_message(*cap, *total, largest))]
    TooLarge {
        /// The cap on the sum of regular files' sizes, in bytes.
        cap: u64,
        /// The sum of regular files' sizes, in bytes.
        total: u64,
        /// The five largest files (path, bytes), largest first.
        largest: Vec<(String, u64)>,
    },
    /// A symlink in the tree points outside it (or is absolute).
    #[error(
        "the symlink {path} points to {target}, outside the code directory; \
         only links that stay inside it can be packed"
    )]
    SymlinkLeaves {
        /// The link, relative to the root.
        path: String,
        /// Its target, as read.
        target: String,
    },
    /// A file that cannot travel in the archive (socket, fifo, device,
    /// non-UTF-8 name, over-long path).
    #[error("{path} is a {kind}, which cannot be packed as code")]
    Unsupported {
        /// The file, relative to the root.
        path: String,
        /// What it is.
        kind: &'static str,
    },
    /// An archive entry that could escape or corrupt the destination.
    #[error("the code archive's entry {path} was refused: {reason}")]
    UnsafeEntry {
        /// The entry's path as written in the archive.
        path: String,
        /// Why it was refused.
        reason: String,
    },
    /// The archive holds more than the unpack limits allow.
    #[error("the code archive holds more than {limit} {what}, over the unpack limit")]
    UnpackTooLarge {
        /// The limit that was exceeded.
        limit: u64,
        /// What the limit counts.
        what: &'static str,
    },
    /// Reading or writing a file failed.
    #[error("I/O error at {path}: {source}")]
    Io {
        /// The file, relative to the root or destination (or the root itself).
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

impl CodeError {
    /// A stable SCREAMING_SNAKE token naming the variant, for APIs and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            CodeError::NotADirectory { .. } => "CODE_NOT_A_DIRECTORY",
            CodeError::TooLarge { .. } => "CODE_TOO_LARGE",
            CodeError::SymlinkLeaves { .. } => "CODE_SYMLINK_LEAVES",
            CodeError::Unsupported { .. } => "CODE_UNSUPPORTED_FILE",
            CodeError::UnsafeEntry { .. } => "CODE_UNSAFE_ENTRY",
            CodeError::UnpackTooLarge { .. } => "CODE_UNPACK_TOO_LARGE",
            CodeError::Io { .. } => "CODE_IO",
        }
    }

    pub(crate) fn io(path: impl Into<String>, source: std::io::Error) -> Self {
        CodeError::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn unsafe_entry(path: impl Into<String>, reason: impl Into<String>) -> Self {
        CodeError::UnsafeEntry {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

const MIB: u64 = 1 << 20;

fn too_large_message(cap: u64, total: u64, largest: &[(String, u64)]) -> String {
    let cap_text = if cap & (MIB - 1) == 0 {
        format!("{} MiB", cap / MIB)
    } else {
        format!("{:.1} MiB", cap as f64 / MIB as f64)
    };
    let mut list = String::new();
    for (i, (path, size)) in largest.iter().enumerate() {
        let sep = if i == 0 { "" } else { ", " };
        let _ = write!(list, "{sep}{path} ({})", human_bytes(*size));
    }
    format!(
        "the code directory holds {} of files, over the {cap_text} cap; the largest are \
         {list}; list what the program does not need in .cohortignore",
        human_bytes(total)
    )
}

/// Bytes as a short human figure: "512 bytes", "3.2 KiB", "40.0 MiB", "1.5 GiB".
fn human_bytes(bytes: u64) -> String {
    const KIB: u64 = 1 << 10;
    const GIB: u64 = 1 << 30;
    let b = bytes as f64;
    match bytes {
        n if n < KIB => format!("{n} bytes"),
        n if n < MIB => format!("{:.1} KiB", b / KIB as f64),
        n if n < GIB => format!("{:.1} MiB", b / MIB as f64),
        _ => format!("{:.1} GiB", b / GIB as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_large_message_names_cap_total_and_files() {
        let err = CodeError::TooLarge {
            cap: 64 << 20,
            total: 100 << 20,
            largest: vec![("data/big.bin".into(), 90 << 20), ("a.py".into(), 2048)],
        };
        let text = err.to_string();
        assert!(text.contains("64 MiB cap"), "{text}");
        assert!(text.contains("100.0 MiB of files"), "{text}");
        assert!(
            text.contains("data/big.bin (90.0 MiB), a.py (2.0 KiB)"),
            "{text}"
        );
        assert!(text.contains(".cohortignore"), "{text}");
        assert_eq!(err.reason(), "CODE_TOO_LARGE");
    }

    #[test]
    fn reasons_are_stable_tokens() {
        let io = CodeError::io("x", std::io::Error::other("boom"));
        assert_eq!(io.reason(), "CODE_IO");
        assert_eq!(io.to_string(), "I/O error at x: boom");
        let e = CodeError::unsafe_entry("../evil", "a `..` component");
        assert_eq!(e.reason(), "CODE_UNSAFE_ENTRY");
        let e = CodeError::Unsupported {
            path: "s".into(),
            kind: "socket",
        };
        assert_eq!(e.reason(), "CODE_UNSUPPORTED_FILE");
        assert_eq!(human_bytes(512), "512 bytes");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }
}
