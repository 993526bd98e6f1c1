//! The `.npy` header: magic, version, then a Python dict literal with
//! `descr`, `fortran_order` and `shape`. The rows follow it, row-major.

use super::super::elem::Elem;
use super::Dense;

const MAGIC: &[u8] = b"\x93NUMPY";
/// Enough for any header numpy writes for a 2-D array (it pads to 64 bytes).
const PROBE: u64 = 4096;

pub fn parse(head: &[u8], file_len: u64) -> Result<Dense, String> {
    if head.len() < 10 || &head[..6] != MAGIC {
        return Err("not an .npy file (bad magic)".into());
    }
    let (dict_at, dict_len) = match head[6] {
        1 => (10usize, u16::from_le_bytes([head[8], head[9]]) as usize),
        2 | 3 if head.len() >= 12 => (
            12usize,
            u32::from_le_bytes([head[8], head[9], head[10], head[11]]) as usize,
        ),
        v => return Err(format!("unsupported .npy version {v}")),
    };
    let dict = head
        .get(dict_at..dict_at + dict_len)
        .ok_or("the .npy header is truncated")?;
    let dict = std::str::from_utf8(dict).map_err(|_| "the .npy header is not text")?;
    let descr = value_of(dict, "descr")
        .and_then(quoted)
        .ok_or("the .npy header has no descr")?;
    let elem = match descr {
        "<f2" => Elem::F16,
        "<f4" => Elem::F32,
        "<f8" => Elem::F64,
        other => {
            return Err(format!(
                "element type {other} is not a little-endian float (f2, f4, f8)"
            ))
        }
    };
    if value_of(dict, "fortran_order").is_some_and(|v| v.starts_with("True")) {
        return Err("is in Fortran (column-major) order; save it C-ordered".into());
    }
    let shape = shape_of(dict).ok_or("the .npy header has no readable shape")?;
    let (rows, d_in) = match shape[..] {
        [rows, d_in] => (rows, d_in),
        _ => {
            return Err(format!(
                "expected a 2-D array [N, d_in], found shape {shape:?}"
            ))
        }
    };
    Dense::new(rows, d_in, elem, (dict_at + dict_len) as u64, file_len)
}

/// How many bytes to read to hold the header.
pub fn probe_len(file_len: u64) -> usize {
    file_len.min(PROBE) as usize
}

/// The text after `'key':` up to the next top-level comma.
fn value_of<'a>(dict: &'a str, key: &str) -> Option<&'a str> {
    let at = dict
        .find(&format!("'{key}'"))
        .or_else(|| dict.find(&format!("\"{key}\"")))?;
    let rest = &dict[at + key.len() + 2..];
    let rest = rest.trim_start().strip_prefix(':')?.trim_start();
    Some(rest)
}

/// The string literal at the start of `text`.
fn quoted(text: &str) -> Option<&str> {
    let q = text.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let rest = &text[1..];
    Some(&rest[..rest.find(q)?])
}

fn shape_of(dict: &str) -> Option<Vec<u64>> {
    let rest = value_of(dict, "shape")?.strip_prefix('(')?;
    let inner = &rest[..rest.find(')')?];
    inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_end_matches('L').parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(dict: &str) -> Vec<u8> {
        let mut h = MAGIC.to_vec();
        h.extend([1, 0]);
        h.extend((dict.len() as u16).to_le_bytes());
        h.extend(dict.as_bytes());
        h
    }

    #[test]
    fn numpy_headers() {
        let h = header("{'descr': '<f2', 'fortran_order': False, 'shape': (10, 4), }\n");
        let d = parse(&h, h.len() as u64 + 80).unwrap();
        assert_eq!((d.rows, d.d_in, d.elem), (10, 4, Elem::F16));
        assert_eq!(d.offset, h.len() as u64);
        let short = parse(&h, h.len() as u64 + 79).unwrap_err();
        assert!(short.contains("truncated"), "{short}");
        let ints = header("{'descr': '<i4', 'fortran_order': False, 'shape': (10, 4), }");
        assert!(parse(&ints, 1 << 20).unwrap_err().contains("<i4"));
        let one_d = header("{'descr': '<f4', 'fortran_order': False, 'shape': (10,), }");
        assert!(parse(&one_d, 1 << 20).unwrap_err().contains("2-D"));
        assert!(parse(b"PK\x03\x04 zip", 100).unwrap_err().contains("magic"));
    }
}
