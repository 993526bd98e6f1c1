//! The step of a PyTorch Lightning checkpoint (`*.ckpt`): the `global_step`
//! of the dict Lightning hands `torch.save`. A `.ckpt` is torch's zip
//! archive; its `data.pkl` (stored, not compressed, and free of tensor
//! bytes) pickles that dict with `epoch` and `global_step` as its first
//! keys, so the first `global_step` key in the pickle is the top-level one.
//! Only that key's integer is read: nothing is unpickled, nothing executed.
//!
//! A file that is not a complete archive (still being written by a
//! framework that saves in place) has no step yet.
#![allow(clippy::disallowed_methods)]

use std::io::Read;
use std::path::Path;

/// The largest `data.pkl` read (it holds names and sizes, not tensors).
const MAX_PICKLE: u64 = 64 << 20;
const KEY: &[u8] = b"global_step";

/// The `global_step` of the Lightning checkpoint at `path`.
pub fn global_step(path: &Path) -> Result<i64, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut archive =
        zip::ZipArchive::new(file).map_err(|e| format!("not a torch archive: {e}"))?;
    let name = archive
        .file_names()
        .find(|n| *n == "data.pkl" || n.ends_with("/data.pkl"))
        .map(str::to_string)
        .ok_or("the archive holds no data.pkl")?;
    let entry = archive.by_name(&name).map_err(|e| format!("{name}: {e}"))?;
    if entry.size() > MAX_PICKLE {
        return Err(format!("{name} is over {MAX_PICKLE} bytes"));
    }
    let mut pickle = Vec::with_capacity(entry.size() as usize);
    entry
        .take(MAX_PICKLE)
        .read_to_end(&mut pickle)
        .map_err(|e| format!("{name}: {e}"))?;
    int_after_key(&pickle, KEY).ok_or_else(|| "no integer global_step in the checkpoint".into())
}

/// The integer a pickle gives the first string `key` it holds (a dict's
/// key followed by its value).
fn int_after_key(pickle: &[u8], key: &[u8]) -> Option<i64> {
    let len = u8::try_from(key.len()).ok()?;
    let mut short = vec![0x8c, len]; // SHORT_BINUNICODE (protocol 4)
    short.extend_from_slice(key);
    let mut long = vec![b'X']; // BINUNICODE (protocols 1-3: torch's 2)
    long.extend_from_slice(&u32::from(len).to_le_bytes());
    long.extend_from_slice(key);
    let at = [short, long]
        .iter()
        .filter_map(|pattern| find(pickle, pattern).map(|i| i + pattern.len()))
        .min()?;
    int_at(skip_memo(pickle, at)?, pickle)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Past the memo opcodes a pickler puts after a value.
fn skip_memo(pickle: &[u8], mut at: usize) -> Option<usize> {
    loop {
        match *pickle.get(at)? {
            0x94 => at += 1, // MEMOIZE
            b'q' => at += 2, // BINPUT
            b'r' => at += 5, // LONG_BINPUT
            _ => return Some(at),
        }
    }
}

/// The integer opcode at `at`.
fn int_at(at: usize, pickle: &[u8]) -> Option<i64> {
    let bytes = |n: usize| pickle.get(at + 1..at + 1 + n);
    match *pickle.get(at)? {
        b'K' => Some(i64::from(*pickle.get(at + 1)?)), // BININT1
        b'M' => Some(i64::from(u16::from_le_bytes(bytes(2)?.try_into().ok()?))), // BININT2
        b'J' => Some(i64::from(i32::from_le_bytes(bytes(4)?.try_into().ok()?))), // BININT
        0x8a => {
            // LONG1: n bytes, little-endian two's complement
            let n = usize::from(*pickle.get(at + 1)?);
            if n == 0 {
                return Some(0);
            }
            if n > 8 {
                return None;
            }
            let digits = pickle.get(at + 2..at + 2 + n)?;
            let fill = if digits[n - 1] & 0x80 != 0 { 0xff } else { 0 };
            let mut le = [fill; 8];
            le[..n].copy_from_slice(digits);
            Some(i64::from_le_bytes(le))
        }
        b'I' => {
            // INT (protocol 0): decimal text to the newline
            let end = pickle[at..].iter().position(|&b| b == b'\n')? + at;
            std::str::from_utf8(&pickle[at + 1..end]).ok()?.parse().ok()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(proto4: bool) -> Vec<u8> {
        if proto4 {
            [&[0x8c, 11][..], KEY].concat()
        } else {
            [&[b'X', 11, 0, 0, 0][..], KEY].concat()
        }
    }

    #[test]
    fn every_integer_encoding_reads() {
        let cases: [(&[u8], i64); 6] = [
            (&[b'K', 7], 7),
            (&[b'M', 0x10, 0x27], 10_000),
            (&[b'J', 0xa0, 0x86, 0x01, 0x00], 100_000),
            (&[0x8a, 5, 0, 0xe4, 0x0b, 0x54, 0x02], 10_000_000_000),
            (&[0x8a, 1, 0xff], -1),
            (b"I42\n", 42),
        ];
        for (value, want) in cases {
            for proto4 in [false, true] {
                let pickle = [
                    &b"}q\x00(X\x05\x00\x00\x00epochK\x01"[..],
                    &key(proto4),
                    b"q\x02",
                    value,
                ]
                .concat();
                assert_eq!(int_after_key(&pickle, KEY), Some(want), "{value:?}");
            }
        }
    }

    #[test]
    fn memo_opcodes_are_skipped_and_the_first_key_wins() {
        let pickle = [
            &key(true)[..],
            &[0x94, b'r', 1, 0, 0, 0, b'K', 3],
            &key(true),
            &[b'K', 9],
        ]
        .concat();
        assert_eq!(int_after_key(&pickle, KEY), Some(3));
    }

    #[test]
    fn no_key_or_no_integer_is_none() {
        assert_eq!(int_after_key(b"}q\x00.", KEY), None);
        let pickle = [&key(false)[..], b"X\x01\x00\x00\x00x"].concat();
        assert_eq!(int_after_key(&pickle, KEY), None, "a string value");
        assert_eq!(int_after_key(&key(false), KEY), None, "cut short");
    }

    #[test]
    fn a_file_that_is_no_archive_has_no_step() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("half.ckpt");
        std::fs::write(&path, b"PK\x03\x04 half written").unwrap();
        assert!(global_step(&path)
            .unwrap_err()
            .contains("not a torch archive"));
    }
}
