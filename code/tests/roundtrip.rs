//! Packing then unpacking gives the same tree back, read-only; the archive
//! is deterministic.

mod common;

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::{Duration, SystemTime};

use cohort_code::{is_sha256_hex, remove_tree, sha256_hex, unpack, UnpackLimits, Unpacked};
use common::{chmod, list, mode, pack_vec, put, read};

fn long_path() -> String {
    format!("long/{}/{}.txt", "d".repeat(60), "f".repeat(80))
}

/// A tree with nested dirs, an empty dir, an exec file, symlinks and a long path.
fn sample_tree(root: &Path) {
    put(root, "train.py", b"print('hi')\n");
    put(root, "run.sh", b"#!/bin/sh\nexec python train.py\n");
    chmod(root, "run.sh", 0o750);
    put(root, "pkg/model/layers.py", b"layers = 3\n");
    put(root, "pkg/__init__.py", b"");
    fs::create_dir_all(root.join("empty/inner")).unwrap();
    put(root, &long_path(), b"long contents\n");
    symlink("pkg/model/layers.py", root.join("layers.py")).unwrap();
    symlink("../train.py", root.join("pkg/train_link.py")).unwrap();
    symlink(long_path(), root.join("long_link")).unwrap();
}

#[test]
fn round_trip_preserves_contents_modes_and_links() {
    let src = tempfile::tempdir().unwrap();
    sample_tree(src.path());
    let (packed, bytes) = pack_vec(src.path());
    assert_eq!(packed.files, 8, "5 regular files + 3 symlinks");
    assert_eq!(packed.content_bytes, 12 + 31 + 11 + 14);

    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("code");
    let limits = UnpackLimits::for_archive(bytes.len() as u64);
    let unpacked = unpack(&bytes[..], &dest, limits).unwrap();
    assert_eq!(
        unpacked,
        Unpacked {
            files: 8,
            content_bytes: packed.content_bytes
        }
    );

    for rel in [
        "train.py",
        "run.sh",
        "pkg/model/layers.py",
        "pkg/__init__.py",
    ] {
        assert_eq!(read(&dest.join(rel)), read(&src.path().join(rel)), "{rel}");
    }
    assert_eq!(read(&dest.join(long_path())), b"long contents\n");
    assert!(long_path().len() > 100);
    assert!(dest.join("empty/inner").is_dir());
    assert_eq!(fs::read_dir(dest.join("empty/inner")).unwrap().count(), 0);

    assert_eq!(mode(&dest.join("run.sh")), 0o555);
    assert_eq!(mode(&dest.join("train.py")), 0o444);
    assert_eq!(mode(&dest.join(long_path())), 0o444);
    for dir in ["", "pkg", "pkg/model", "empty", "empty/inner", "long"] {
        assert_eq!(mode(&dest.join(dir)), 0o555, "dir {dir:?}");
    }

    let link = |rel: &str| fs::read_link(dest.join(rel)).unwrap();
    assert_eq!(link("layers.py"), Path::new("pkg/model/layers.py"));
    assert_eq!(link("pkg/train_link.py"), Path::new("../train.py"));
    assert_eq!(link("long_link"), Path::new(&long_path()));
    assert_eq!(read(&dest.join("pkg/train_link.py")), b"print('hi')\n");

    remove_tree(&dest).unwrap();
    assert!(!dest.exists());
}

#[test]
fn archive_lists_dirs_sorted_without_root_or_git() {
    let src = tempfile::tempdir().unwrap();
    sample_tree(src.path());
    put(src.path(), ".git/HEAD", b"ref: refs/heads/main\n");
    let (_, bytes) = pack_vec(src.path());
    let paths = list(&bytes);
    let mut sorted = paths.clone();
    sorted.sort();
    assert_eq!(paths, sorted);
    assert!(paths.iter().any(|p| p == "empty/inner"));
    assert!(paths.iter().any(|p| p == &long_path()));
    assert!(!paths
        .iter()
        .any(|p| p.is_empty() || p == "." || p.starts_with(".git")));
}

#[test]
fn headers_are_normalised() {
    let src = tempfile::tempdir().unwrap();
    sample_tree(src.path());
    chmod(src.path(), "train.py", 0o600);
    let (_, bytes) = pack_vec(src.path());
    let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(&bytes[..]));
    for entry in ar.entries().unwrap() {
        let entry = entry.unwrap();
        let h = entry.header();
        assert_eq!(h.mtime().unwrap(), 0);
        assert_eq!((h.uid().unwrap(), h.gid().unwrap()), (0, 0));
        assert_eq!(h.username_bytes(), Some(&b""[..]));
        assert_eq!(h.groupname_bytes(), Some(&b""[..]));
        let want = match (h.entry_type(), &*entry.path_bytes()) {
            (tar::EntryType::Symlink, _) => 0o777,
            (tar::EntryType::Directory, _) | (_, b"run.sh") => 0o755,
            _ => 0o644,
        };
        assert_eq!(h.mode().unwrap(), want, "{:?}", entry.path());
    }
}

#[test]
fn packing_is_deterministic() {
    let src = tempfile::tempdir().unwrap();
    sample_tree(src.path());
    let (first, bytes1) = pack_vec(src.path());
    let (second, bytes2) = pack_vec(src.path());
    assert_eq!(bytes1, bytes2);
    assert_eq!(first, second);
    assert!(is_sha256_hex(&first.sha256));
    assert_eq!(first.sha256, sha256_hex(&bytes1));
    assert_eq!(first.size_bytes, bytes1.len() as u64);
}

#[test]
fn a_copy_with_other_mtimes_packs_identically() {
    let src = tempfile::tempdir().unwrap();
    sample_tree(src.path());
    let copy = tempfile::tempdir().unwrap();
    // Made in another order, at other times.
    fs::create_dir_all(copy.path().join("empty/inner")).unwrap();
    put(copy.path(), &long_path(), b"long contents\n");
    put(copy.path(), "pkg/__init__.py", b"");
    put(copy.path(), "pkg/model/layers.py", b"layers = 3\n");
    put(copy.path(), "run.sh", b"#!/bin/sh\nexec python train.py\n");
    chmod(copy.path(), "run.sh", 0o700);
    put(copy.path(), "train.py", b"print('hi')\n");
    symlink(long_path(), copy.path().join("long_link")).unwrap();
    symlink("../train.py", copy.path().join("pkg/train_link.py")).unwrap();
    symlink("pkg/model/layers.py", copy.path().join("layers.py")).unwrap();
    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    for rel in ["train.py", "run.sh", "pkg/model/layers.py"] {
        let file = fs::File::options()
            .write(true)
            .open(copy.path().join(rel))
            .unwrap();
        file.set_modified(old).unwrap();
    }
    assert_eq!(pack_vec(src.path()), pack_vec(copy.path()));
}

#[test]
fn a_changed_byte_changes_the_hash() {
    let src = tempfile::tempdir().unwrap();
    sample_tree(src.path());
    let (before, _) = pack_vec(src.path());
    put(src.path(), "pkg/model/layers.py", b"layers = 4\n");
    let (after, _) = pack_vec(src.path());
    assert_ne!(before.sha256, after.sha256);
    assert_eq!(before.content_bytes, after.content_bytes);
}

#[test]
fn an_exec_bit_changes_the_hash() {
    let src = tempfile::tempdir().unwrap();
    sample_tree(src.path());
    let (before, _) = pack_vec(src.path());
    chmod(src.path(), "train.py", 0o744);
    assert_ne!(before.sha256, pack_vec(src.path()).0.sha256);
}

#[test]
fn empty_directory_round_trips() {
    let src = tempfile::tempdir().unwrap();
    let (packed, bytes) = pack_vec(src.path());
    assert_eq!((packed.files, packed.content_bytes), (0, 0));
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("code");
    let unpacked = unpack(&bytes[..], &dest, UnpackLimits::for_archive(0)).unwrap();
    assert_eq!(unpacked.files, 0);
    assert_eq!(mode(&dest), 0o555);
    remove_tree(&dest).unwrap();
    assert!(!dest.exists());
    remove_tree(&dest).unwrap();
}

#[test]
fn unpack_limits_scale_with_the_archive() {
    let small = UnpackLimits::for_archive(1 << 20);
    assert_eq!(small.max_content_bytes, 256 << 20);
    assert_eq!(small.max_entries, 200_000);
    assert_eq!(
        UnpackLimits::for_archive(100 << 20).max_content_bytes,
        800 << 20
    );
    assert_eq!(
        UnpackLimits::for_archive(u64::MAX).max_content_bytes,
        u64::MAX
    );
}
