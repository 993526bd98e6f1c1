//! Writing the collected items as a deterministic GNU tar inside a gzip
//! stream, hashing the bytes as they go out.

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

use flate2::{Compression, GzBuilder};
use tar::{EntryType, Header};

use crate::item::{Item, Kind, Packed};
use crate::stream::{ExactReader, HashingWriter};
use crate::CodeError;

/// How errors that come from the output (not from a file) are named.
const OUTPUT: &str = "the archive output";

type TarOut<W> = tar::Builder<flate2::write::GzEncoder<HashingWriter<W>>>;

/// Writes `items` (already sorted and checked) under `root` into `out`.
pub(crate) fn write_archive<W: Write>(
    root: &Path,
    items: &[Item],
    out: W,
) -> Result<Packed, CodeError> {
    let gz = GzBuilder::new()
        .mtime(0)
        .write(HashingWriter::new(out), Compression::default());
    let mut tar = tar::Builder::new(gz);
    let (mut files, mut content_bytes) = (0u64, 0u64);
    for item in items {
        append(&mut tar, root, item).map_err(|e| blame(&tar, &item.path, e))?;
        match item.kind {
            Kind::Dir => {}
            Kind::File { size, .. } => {
                files += 1;
                content_bytes = content_bytes.saturating_add(size);
            }
            Kind::Symlink { .. } => files += 1,
        }
    }
    let gz = tar.into_inner().map_err(|e| CodeError::io(OUTPUT, e))?;
    let mut hashing = gz.finish().map_err(|e| CodeError::io(OUTPUT, e))?;
    hashing.flush().map_err(|e| CodeError::io(OUTPUT, e))?;
    let (sha256, size_bytes) = hashing.finish();
    Ok(Packed {
        sha256,
        size_bytes,
        files,
        content_bytes,
    })
}

/// Names the output when writing it failed, else the item being packed.
fn blame<W: Write>(tar: &TarOut<W>, path: &str, err: io::Error) -> CodeError {
    if tar.get_ref().get_ref().failed() {
        CodeError::io(OUTPUT, err)
    } else {
        CodeError::io(path, err)
    }
}

fn append<W: Write>(tar: &mut TarOut<W>, root: &Path, item: &Item) -> io::Result<()> {
    match &item.kind {
        Kind::Dir => {
            let mut header = header(EntryType::Directory, 0o755, 0);
            tar.append_data(&mut header, &item.path, io::empty())
        }
        Kind::File { size, exec } => {
            let mode = if *exec { 0o755 } else { 0o644 };
            let mut header = header(EntryType::Regular, mode, *size);
            let file = File::open(root.join(&item.path))?;
            tar.append_data(&mut header, &item.path, ExactReader::new(file, *size))
        }
        Kind::Symlink { target } => {
            let mut header = header(EntryType::Symlink, 0o777, 0);
            tar.append_link(&mut header, &item.path, target)
        }
    }
}

/// A GNU header with fixed metadata: mtime 0, uid/gid 0, no owner names.
fn header(kind: EntryType, mode: u32, size: u64) -> Header {
    let mut header = Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_size(size);
    header.set_mtime(0);
    header.set_uid(0);
    header.set_gid(0);
    header
}
