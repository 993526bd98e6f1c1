//! Unpacking refuses hand-built malicious archives and leaves no
//! destination behind.

mod common;

use std::fs;
use std::io::Write;
use std::path::Path;

use cohort_code::{unpack, CodeError, UnpackLimits};
use flate2::write::GzEncoder;
use flate2::Compression;
use tar::{EntryType, Header};

/// One entry, written with raw header fields (no path checks).
struct Raw<'a> {
    name: &'a [u8],
    kind: EntryType,
    link: &'a [u8],
    data: &'a [u8],
}

fn file<'a>(name: &'a str, data: &'a [u8]) -> Raw<'a> {
    Raw {
        name: name.as_bytes(),
        kind: EntryType::Regular,
        link: b"",
        data,
    }
}

fn link<'a>(name: &'a str, target: &'a str) -> Raw<'a> {
    Raw {
        name: name.as_bytes(),
        kind: EntryType::Symlink,
        link: target.as_bytes(),
        data: b"",
    }
}

fn header(raw: &Raw) -> Header {
    let mut h = Header::new_gnu();
    h.as_old_mut().name[..raw.name.len()].copy_from_slice(raw.name);
    h.as_old_mut().linkname[..raw.link.len()].copy_from_slice(raw.link);
    h.set_entry_type(raw.kind);
    h.set_mode(0o644);
    h.set_size(raw.data.len() as u64);
    h.set_cksum();
    h
}

fn archive(entries: &[Raw]) -> Vec<u8> {
    let mut tar = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::fast()));
    for raw in entries {
        tar.append(&header(raw), raw.data).unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap()
}

/// Unpacks `bytes` into a fresh `code` dir under `tmp`, expecting `reason`;
/// checks nothing was left behind.
fn refuse(tmp: &Path, bytes: &[u8], limits: UnpackLimits, reason: &str) -> CodeError {
    let dest = tmp.join("code");
    let err = unpack(bytes, &dest, limits).unwrap_err();
    assert_eq!(err.reason(), reason, "{err}");
    assert!(!dest.exists(), "dest left behind after: {err}");
    let left: Vec<_> = fs::read_dir(tmp).unwrap().collect();
    assert!(left.is_empty(), "{left:?} left after: {err}");
    err
}

fn refuse_unsafe(entries: &[Raw]) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let limits = UnpackLimits::for_archive(0);
    let err = refuse(tmp.path(), &archive(entries), limits, "CODE_UNSAFE_ENTRY");
    err.to_string()
}

#[test]
fn the_helpers_build_a_valid_archive() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("code");
    let bytes = archive(&[file("a/b.txt", b"hello"), link("a/l", "b.txt")]);
    let unpacked = unpack(&bytes[..], &dest, UnpackLimits::for_archive(0)).unwrap();
    assert_eq!((unpacked.files, unpacked.content_bytes), (2, 5));
    assert_eq!(fs::read(dest.join("a/l")).unwrap(), b"hello");
    assert_eq!(common::mode(&dest.join("a")), 0o555);
    cohort_code::remove_tree(&dest).unwrap();
}

#[test]
fn parent_dir_path_is_refused() {
    let text = refuse_unsafe(&[file("ok.txt", b"ok"), file("../evil", b"x")]);
    assert!(text.contains("../evil"), "{text}");
    let text = refuse_unsafe(&[file("a/../../evil", b"x")]);
    assert!(text.contains("`..`"), "{text}");
}

#[test]
fn absolute_path_is_refused() {
    let text = refuse_unsafe(&[file("/abs", b"x")]);
    assert!(text.contains("absolute"), "{text}");
}

#[test]
fn dot_and_non_utf8_paths_are_refused() {
    refuse_unsafe(&[file("./a", b"x")]);
    refuse_unsafe(&[Raw {
        name: b"bad\xff",
        kind: EntryType::Regular,
        link: b"",
        data: b"x",
    }]);
}

#[test]
fn a_symlink_to_the_parent_then_a_file_through_it_is_refused() {
    refuse_unsafe(&[link("l", ".."), file("l/x", b"x")]);
}

#[test]
fn a_file_under_a_symlink_inside_the_root_is_refused() {
    let text = refuse_unsafe(&[link("d/l", ".."), file("d/l/x", b"x")]);
    assert!(text.contains("under the symlink d/l"), "{text}");
    let text = refuse_unsafe(&[link("l", "real"), file("l", b"x")]);
    assert!(text.contains("duplicate"), "{text}");
}

#[test]
fn a_symlink_pointing_outside_is_refused() {
    for target in ["../outside", "/etc/passwd", "a/../../x", "d/../.."] {
        let text = refuse_unsafe(&[link("l", target)]);
        assert!(text.contains("outside the destination"), "{text}");
    }
}

#[test]
fn a_hard_link_entry_is_refused() {
    let hard = Raw {
        name: b"h",
        kind: EntryType::Link,
        link: b"a",
        data: b"",
    };
    let text = refuse_unsafe(&[file("a", b"x"), hard]);
    assert!(text.contains("hard link"), "{text}");
}

#[test]
fn device_and_fifo_entries_are_refused() {
    for kind in [EntryType::Char, EntryType::Block, EntryType::Fifo] {
        let raw = Raw {
            name: b"dev",
            kind,
            link: b"",
            data: b"",
        };
        refuse_unsafe(&[raw]);
    }
}

#[test]
fn a_duplicate_entry_is_refused() {
    let text = refuse_unsafe(&[file("a", b"first"), file("a", b"second")]);
    assert!(text.contains("duplicate"), "{text}");
}

#[test]
fn a_file_over_a_directory_is_refused() {
    refuse_unsafe(&[file("a/b", b"x"), file("a", b"y")]);
    refuse_unsafe(&[file("a", b"x"), file("a/b", b"y")]);
}

#[test]
fn content_over_the_limit_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let bytes = archive(&[file("a", &[1u8; 600]), file("b", &[2u8; 600])]);
    let limits = UnpackLimits {
        max_content_bytes: 1000,
        max_entries: 10,
    };
    let err = refuse(tmp.path(), &bytes, limits, "CODE_UNPACK_TOO_LARGE");
    assert!(
        matches!(err, CodeError::UnpackTooLarge { limit: 1000, .. }),
        "{err:?}"
    );
}

#[test]
fn too_many_entries_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let names = ["a", "b", "c", "d"];
    let entries: Vec<Raw> = names.iter().map(|n| file(n, b"x")).collect();
    let limits = UnpackLimits {
        max_content_bytes: 1 << 20,
        max_entries: 3,
    };
    let err = refuse(
        tmp.path(),
        &archive(&entries),
        limits,
        "CODE_UNPACK_TOO_LARGE",
    );
    assert!(err.to_string().contains("3 entries"), "{err}");
    // Directories an archive implies count too.
    let deep = archive(&[file("a/b/c/d", b"x")]);
    refuse(tmp.path(), &deep, limits, "CODE_UNPACK_TOO_LARGE");
}

#[test]
fn a_huge_long_name_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let name = vec![b'n'; 1 << 20];
    let mut long = Header::new_gnu();
    long.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
    long.set_entry_type(EntryType::GNULongName);
    long.set_size(name.len() as u64);
    long.set_cksum();
    let mut tar = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::fast()));
    tar.append(&long, &name[..]).unwrap();
    let entry = file("short", b"x");
    tar.append(&header(&entry), entry.data).unwrap();
    let bytes = tar.into_inner().unwrap().finish().unwrap();
    refuse(
        tmp.path(),
        &bytes,
        UnpackLimits::for_archive(0),
        "CODE_UNPACK_TOO_LARGE",
    );
}

#[test]
fn a_truncated_or_garbled_archive_is_an_io_error() {
    let tmp = tempfile::tempdir().unwrap();
    let bytes = archive(&[file("a", &[3u8; 5000])]);
    let limits = UnpackLimits::for_archive(0);
    refuse(tmp.path(), &bytes[..bytes.len() / 2], limits, "CODE_IO");
    refuse(tmp.path(), b"not a gzip stream", limits, "CODE_IO");
}

#[test]
fn an_existing_destination_is_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("code");
    fs::create_dir(&dest).unwrap();
    fs::File::create(dest.join("mine"))
        .unwrap()
        .write_all(b"keep")
        .unwrap();
    let bytes = archive(&[file("a", b"x")]);
    let err = unpack(&bytes[..], &dest, UnpackLimits::for_archive(0)).unwrap_err();
    assert_eq!(err.reason(), "CODE_IO");
    assert_eq!(fs::read(dest.join("mine")).unwrap(), b"keep");
    let missing_parent = tmp.path().join("no/such/dir");
    assert!(unpack(&bytes[..], &missing_parent, UnpackLimits::for_archive(0)).is_err());
    assert!(!tmp.path().join("no").exists());
}
