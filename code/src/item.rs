//! What a packed tree holds: the items the walk found and what the
//! archive came to (shared by the walk, `pack.rs`, and the writer,
//! `write.rs`).

/// What [`pack`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packed {
    /// 64 lowercase hex: the SHA-256 of the archive bytes.
    pub sha256: String,
    /// The archive's size in bytes.
    pub size_bytes: u64,
    /// Regular files and symlinks in the archive.
    pub files: u64,
    /// The sum of the regular files' sizes.
    pub content_bytes: u64,
}

/// One thing to pack, with its path relative to the root (`/`-separated).
#[derive(Debug)]
pub(crate) struct Item {
    pub(crate) path: String,
    pub(crate) kind: Kind,
}

#[derive(Debug)]
pub(crate) enum Kind {
    Dir,
    File { size: u64, exec: bool },
    Symlink { target: String },
}
