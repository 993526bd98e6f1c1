//! Unpacking an untrusted archive into a fresh, read-only directory.

use std::fs::{self, OpenOptions, Permissions};
use std::io::{self, Read};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use flate2::read::GzDecoder;
use tar::{Entry, EntryType};

use crate::layout::{Layout, NodeKind};
use crate::paths::{archive_path, link_stays_inside, MAX_PATH_BYTES};
use crate::stream::{Budget, GuardedReader};
use crate::{remove_tree, CodeError};

/// The entry cap [`UnpackLimits::for_archive`] sets.
pub const MAX_UNPACK_ENTRIES: u64 = 200_000;

/// The least content cap [`UnpackLimits::for_archive`] sets: 256 MiB.
const MIN_CONTENT_BYTES: u64 = 256 << 20;

/// Decompressed bytes one entry's headers (GNU long names, pax records) may
/// take beyond its data; the tar reader holds them in memory.
const ENTRY_METADATA_BYTES: u64 = 64 << 10;

/// Cap on the summed length of all symlink targets (held until the end).
const MAX_LINK_TARGET_BYTES: u64 = 64 << 20;

/// How much an archive may unpack to.
#[derive(Debug, Clone, Copy)]
pub struct UnpackLimits {
    /// Cap on the sum of regular files' sizes.
    pub max_content_bytes: u64,
    /// Cap on entries, counting directories the archive implies but does
    /// not list.
    pub max_entries: u64,
}

impl UnpackLimits {
    /// Limits for an archive of `archive_bytes`: max(256 MiB, 8 x
    /// archive_bytes) of content and 200,000 entries.
    pub fn for_archive(archive_bytes: u64) -> Self {
        Self {
            max_content_bytes: MIN_CONTENT_BYTES.max(archive_bytes.saturating_mul(8)),
            max_entries: MAX_UNPACK_ENTRIES,
        }
    }
}

/// What [`unpack`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unpacked {
    /// Regular files and symlinks written.
    pub files: u64,
    /// The sum of the regular files' sizes.
    pub content_bytes: u64,
}

/// Unpacks the archive into `dest` (which must not exist; its parent must),
/// then makes the tree read-only: files 0o444 (0o555 when the archive gave
/// them an exec bit), directories 0o555.
///
/// The archive is untrusted: absolute paths, `.`/`..` components, duplicate
/// entries, entries under a symlink entry, symlinks leaving `dest`, and any
/// entry type but regular file, directory and symlink are refused with
/// [`CodeError::UnsafeEntry`]; content and entry counts over `limits` with
/// [`CodeError::UnpackTooLarge`]. Nothing is ever written through a symlink.
/// On any error the partial `dest` is removed.
pub fn unpack(
    archive: impl Read,
    dest: &Path,
    limits: UnpackLimits,
) -> Result<Unpacked, CodeError> {
    fs::create_dir(dest).map_err(|e| CodeError::io(dest.display().to_string(), e))?;
    let result = extract(archive, dest, limits);
    if result.is_err() {
        let _ = remove_tree(dest);
    }
    result
}

fn extract(archive: impl Read, dest: &Path, limits: UnpackLimits) -> Result<Unpacked, CodeError> {
    let budget = Budget::new(ENTRY_METADATA_BYTES);
    let reader = GuardedReader::new(GzDecoder::new(archive), budget.clone());
    let mut archive = tar::Archive::new(reader);
    let mut state = State::new(dest, limits);
    let entries = archive.entries().map_err(|e| read_error(&budget, e))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| read_error(&budget, e))?;
        let data = entry.size().div_ceil(512).saturating_mul(512);
        budget.reset(data.saturating_add(ENTRY_METADATA_BYTES));
        state.entry(&mut entry)?;
    }
    state.layout.finish(dest)?;
    Ok(state.unpacked)
}

fn read_error(budget: &Budget, err: io::Error) -> CodeError {
    if budget.tripped() {
        CodeError::UnpackTooLarge {
            limit: ENTRY_METADATA_BYTES,
            what: "bytes of header data for one entry",
        }
    } else {
        CodeError::io("the archive", err)
    }
}

struct State<'a> {
    dest: &'a Path,
    limits: UnpackLimits,
    layout: Layout,
    entries: u64,
    link_bytes: u64,
    unpacked: Unpacked,
}

impl<'a> State<'a> {
    fn new(dest: &'a Path, limits: UnpackLimits) -> Self {
        Self {
            dest,
            limits,
            layout: Layout::default(),
            entries: 0,
            link_bytes: 0,
            unpacked: Unpacked {
                files: 0,
                content_bytes: 0,
            },
        }
    }

    fn entry<R: Read>(&mut self, entry: &mut Entry<R>) -> Result<(), CodeError> {
        self.count(1)?;
        let kind = entry.header().entry_type();
        if kind.is_pax_global_extensions() {
            return Ok(());
        }
        let path = entry_path(entry)?;
        match kind {
            EntryType::Regular | EntryType::Continuous => self.file(path, entry),
            EntryType::Directory => self.dir(path, entry.size()),
            EntryType::Symlink => self.symlink(path, entry),
            other => Err(CodeError::unsafe_entry(
                path,
                format!("it is {}, which code archives never hold", describe(other)),
            )),
        }
    }

    /// Counts `n` more entries against the limit.
    fn count(&mut self, n: u64) -> Result<(), CodeError> {
        self.entries = self.entries.saturating_add(n);
        if self.entries > self.limits.max_entries {
            return Err(CodeError::UnpackTooLarge {
                limit: self.limits.max_entries,
                what: "entries",
            });
        }
        Ok(())
    }

    /// Records `path` in the layout and creates its parent directories.
    fn place(&mut self, path: &str, kind: NodeKind) -> Result<(), CodeError> {
        let created = self
            .layout
            .insert(path, kind)
            .map_err(|reason| CodeError::unsafe_entry(path, reason))?;
        self.count(created)?;
        if let Some((parent, _)) = path.rsplit_once('/') {
            fs::create_dir_all(self.dest.join(parent)).map_err(|e| CodeError::io(parent, e))?;
        }
        Ok(())
    }

    fn dir(&mut self, path: String, size: u64) -> Result<(), CodeError> {
        if size != 0 {
            return Err(CodeError::unsafe_entry(
                path,
                "a directory entry carries data",
            ));
        }
        self.place(&path, NodeKind::Dir)?;
        fs::create_dir_all(self.dest.join(&path)).map_err(|e| CodeError::io(path, e))
    }

    fn file<R: Read>(&mut self, path: String, entry: &mut Entry<R>) -> Result<(), CodeError> {
        let size = entry.size();
        let max = self.limits.max_content_bytes;
        if size > max.saturating_sub(self.unpacked.content_bytes) {
            let what = "bytes of file content";
            return Err(CodeError::UnpackTooLarge { limit: max, what });
        }
        let mode = entry.header().mode();
        let mode = mode.map_err(|_| CodeError::unsafe_entry(&path, "its mode is unreadable"))?;
        self.place(&path, NodeKind::File)?;
        let readonly = if mode & 0o111 != 0 { 0o555 } else { 0o444 };
        write_file(&self.dest.join(&path), entry.take(size), size, readonly)
            .map_err(|e| CodeError::io(path, e))?;
        self.unpacked.files += 1;
        self.unpacked.content_bytes += size;
        Ok(())
    }

    fn symlink<R: Read>(&mut self, path: String, entry: &mut Entry<R>) -> Result<(), CodeError> {
        let target = link_target(&path, entry)?;
        self.link_bytes = self.link_bytes.saturating_add(target.len() as u64);
        if self.link_bytes > MAX_LINK_TARGET_BYTES {
            let what = "bytes of symlink targets";
            let limit = MAX_LINK_TARGET_BYTES;
            return Err(CodeError::UnpackTooLarge { limit, what });
        }
        self.place(&path, NodeKind::Symlink(target.into()))?;
        self.unpacked.files += 1;
        Ok(())
    }
}

/// The entry's validated path.
fn entry_path<R: Read>(entry: &Entry<R>) -> Result<String, CodeError> {
    let raw = entry.path_bytes();
    archive_path(&raw)
        .map_err(|reason| CodeError::unsafe_entry(String::from_utf8_lossy(&raw), reason))
}

/// The validated target of the symlink entry at `path`.
fn link_target<R: Read>(path: &str, entry: &Entry<R>) -> Result<String, CodeError> {
    let refuse = |reason: &str| CodeError::unsafe_entry(path, reason);
    if entry.size() != 0 {
        return Err(refuse("a symlink entry carries data"));
    }
    let raw = entry
        .link_name_bytes()
        .ok_or_else(|| refuse("the symlink has no target"))?;
    let target = std::str::from_utf8(&raw).map_err(|_| refuse("its target is not UTF-8"))?;
    if target.is_empty() || target.len() > MAX_PATH_BYTES {
        return Err(refuse("its target is empty or longer than 4096 bytes"));
    }
    if !link_stays_inside(path, target) {
        let reason = format!("the symlink points to {target}, outside the destination");
        return Err(CodeError::unsafe_entry(path, reason));
    }
    Ok(target.to_owned())
}

/// Writes exactly `size` bytes of `data` to a new file at `full`, then gives
/// it the read-only `mode`.
fn write_file(full: &Path, mut data: impl Read, size: u64, mode: u32) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(full)?;
    let copied = io::copy(&mut data, &mut file)?;
    if copied != size {
        let msg = "the archive ends inside this file";
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, msg));
    }
    file.set_permissions(Permissions::from_mode(mode))
}

fn describe(kind: EntryType) -> String {
    match kind {
        EntryType::Link => "a hard link".into(),
        EntryType::Char => "a character device".into(),
        EntryType::Block => "a block device".into(),
        EntryType::Fifo => "a fifo".into(),
        EntryType::GNUSparse => "a sparse file".into(),
        other => format!("an entry of type {:?}", char::from(other.as_byte())),
    }
}
