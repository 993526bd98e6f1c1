//! What the walk takes and what packing refuses.

mod common;

use std::os::unix::fs::symlink;

use cohort_code::{pack, CodeError};
use common::{list, pack_vec, put};

#[test]
fn gitignore_cohortignore_and_nested_gitignore_are_honoured_outside_git() {
    let src = tempfile::tempdir().unwrap();
    let root = src.path();
    put(root, ".gitignore", b"*.log\nbuild/\n");
    put(root, ".cohortignore", b"data/\n/checkpoints\n");
    put(root, "sub/.gitignore", b"secret.txt\n");
    put(root, ".ignore", b"keep.txt\n");
    for rel in [
        "train.py",
        "run.log",
        "build/out.o",
        "data/shard0.bin",
        "checkpoints/last.pt",
        "sub/secret.txt",
        "sub/ok.txt",
        "secret.txt",
        "keep.txt",
        ".hidden_config",
    ] {
        put(root, rel, rel.as_bytes());
    }
    let (_, bytes) = pack_vec(root);
    let paths = list(&bytes);
    let expected = [
        ".cohortignore",
        ".gitignore",
        ".hidden_config",
        ".ignore",
        "keep.txt",
        "secret.txt",
        "sub",
        "sub/.gitignore",
        "sub/ok.txt",
        "train.py",
    ];
    assert_eq!(paths, expected);
}

#[test]
fn git_dir_is_skipped_and_info_exclude_honoured() {
    let src = tempfile::tempdir().unwrap();
    let root = src.path();
    put(root, ".git/HEAD", b"ref: refs/heads/main\n");
    put(root, ".git/info/exclude", b"local-notes.md\n");
    put(root, "local-notes.md", b"notes");
    put(root, "sub/.git", b"gitdir: ../.git/modules/sub\n");
    put(root, "sub/lib.py", b"x = 1\n");
    put(root, "main.py", b"print(1)\n");
    let (_, bytes) = pack_vec(root);
    assert_eq!(list(&bytes), ["main.py", "sub", "sub/lib.py"]);
}

#[test]
fn a_parent_directorys_gitignore_is_honoured() {
    let tmp = tempfile::tempdir().unwrap();
    put(tmp.path(), ".gitignore", b"*.tmp\n");
    let root = tmp.path().join("project");
    put(&root, "a.py", b"a");
    put(&root, "scratch.tmp", b"t");
    let (_, bytes) = pack_vec(&root);
    assert_eq!(list(&bytes), ["a.py"]);
}

#[test]
fn too_large_names_the_cap_and_the_largest_files() {
    let src = tempfile::tempdir().unwrap();
    let sizes = [
        ("weights/a.bin", 400_000),
        ("weights/b.bin", 350_000),
        ("c.bin", 300_000),
        ("d.bin", 250_000),
        ("e.bin", 200_000),
        ("small.py", 10),
    ];
    for (rel, size) in sizes {
        put(src.path(), rel, &vec![7u8; size]);
    }
    let err = pack(src.path(), 1 << 20, Vec::new()).unwrap_err();
    assert_eq!(err.reason(), "CODE_TOO_LARGE");
    let CodeError::TooLarge {
        cap,
        total,
        largest,
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!((*cap, *total), (1 << 20, 1_500_010));
    let names: Vec<&str> = largest.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        names,
        ["weights/a.bin", "weights/b.bin", "c.bin", "d.bin", "e.bin"]
    );
    assert_eq!(largest[0].1, 400_000);
    let text = err.to_string();
    assert!(text.contains("1 MiB cap"), "{text}");
    assert!(text.contains("1.4 MiB of files"), "{text}");
    assert!(text.contains("weights/a.bin (390.6 KiB)"), "{text}");
    assert!(!text.contains("small.py"), "{text}");
    assert!(text.contains(".cohortignore"), "{text}");
}

#[test]
fn the_cap_counts_only_what_is_packed() {
    let src = tempfile::tempdir().unwrap();
    put(src.path(), "big.bin", &vec![0u8; 2000]);
    put(src.path(), "a.py", &[b'x'; 500]);
    assert!(pack(src.path(), 1000, Vec::new()).is_err());
    put(src.path(), ".cohortignore", b"big.bin\n");
    let packed = pack(src.path(), 1000, Vec::new()).unwrap();
    assert_eq!(packed.content_bytes, 500 + 8);
}

#[test]
fn symlinks_leaving_the_root_are_refused() {
    for target in ["../outside", "/etc", "sub/../../x"] {
        let src = tempfile::tempdir().unwrap();
        put(src.path(), "a.py", b"a");
        symlink(target, src.path().join("link")).unwrap();
        let err = pack(src.path(), 1 << 20, Vec::new()).unwrap_err();
        assert_eq!(err.reason(), "CODE_SYMLINK_LEAVES", "{target}: {err}");
        let CodeError::SymlinkLeaves { path, target: t } = &err else {
            panic!("{err:?}");
        };
        assert_eq!((path.as_str(), t.as_str()), ("link", target));
    }
}

#[test]
fn a_symlink_to_a_directory_is_packed_as_a_link() {
    let src = tempfile::tempdir().unwrap();
    put(src.path(), "real/x.py", b"x");
    symlink("real", src.path().join("alias")).unwrap();
    let (packed, bytes) = pack_vec(src.path());
    assert_eq!(list(&bytes), ["alias", "real", "real/x.py"]);
    assert_eq!(packed.files, 2);
}

#[test]
fn sockets_are_unsupported() {
    let src = tempfile::tempdir().unwrap();
    put(src.path(), "a.py", b"a");
    let _listener = std::os::unix::net::UnixListener::bind(src.path().join("sock")).unwrap();
    let err = pack(src.path(), 1 << 20, Vec::new()).unwrap_err();
    assert_eq!(err.reason(), "CODE_UNSUPPORTED_FILE");
    assert!(err.to_string().contains("sock is a socket"), "{err}");
}

#[test]
fn a_file_is_not_a_directory() {
    let src = tempfile::tempdir().unwrap();
    put(src.path(), "a.py", b"a");
    let err = pack(&src.path().join("a.py"), 1 << 20, Vec::new()).unwrap_err();
    assert_eq!(err.reason(), "CODE_NOT_A_DIRECTORY");
    let err = pack(&src.path().join("missing"), 1 << 20, Vec::new()).unwrap_err();
    assert_eq!(err.reason(), "CODE_IO");
}

#[test]
fn a_failing_output_is_named() {
    struct Broken;
    impl std::io::Write for Broken {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("disk full"))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let src = tempfile::tempdir().unwrap();
    put(src.path(), "a.py", &[b'a'; 100_000]);
    let err = pack(src.path(), 1 << 20, Broken).unwrap_err();
    assert_eq!(err.reason(), "CODE_IO");
    assert!(err.to_string().contains("the archive output"), "{err}");
}

#[test]
fn a_root_given_through_a_symlink_packs_its_target() {
    let tmp = tempfile::tempdir().unwrap();
    let real = tmp.path().join("real");
    put(&real, "a.py", b"a");
    put(&real, "pkg/b.py", b"b");
    std::os::unix::fs::symlink(&real, tmp.path().join("alias")).unwrap();
    let via_link = pack_vec(&tmp.path().join("alias"));
    assert_eq!(list(&via_link.1), ["a.py", "pkg", "pkg/b.py"]);
    assert_eq!(via_link, pack_vec(&real));
}
