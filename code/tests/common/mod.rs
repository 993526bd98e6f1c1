//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use cohort_code::{pack, Packed, DEFAULT_MAX_CONTENT_BYTES};

/// Writes `contents` at `root/rel`, creating parents.
pub fn put(root: &Path, rel: &str, contents: &[u8]) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, contents).unwrap();
}

/// Sets `root/rel`'s mode.
pub fn chmod(root: &Path, rel: &str, mode: u32) {
    fs::set_permissions(root.join(rel), fs::Permissions::from_mode(mode)).unwrap();
}

/// Packs `root` with the default cap into memory.
pub fn pack_vec(root: &Path) -> (Packed, Vec<u8>) {
    let mut out = Vec::new();
    let packed = pack(root, DEFAULT_MAX_CONTENT_BYTES, &mut out).unwrap();
    (packed, out)
}

/// The entry paths of a .tar.gz, in archive order.
pub fn list(archive: &[u8]) -> Vec<String> {
    let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(archive));
    ar.entries()
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            String::from_utf8(e.path_bytes().into_owned()).unwrap()
        })
        .collect()
}

/// The mode bits (0o7777) of `path`, not following a symlink.
pub fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Reads a file fully.
pub fn read(path: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    fs::File::open(path).unwrap().read_to_end(&mut out).unwrap();
    out
}
