//! The `.safetensors` header: a little-endian u64 length, then JSON naming
//! each tensor's dtype, shape and byte range (relative to the end of the
//! header).

use super::super::elem::Elem;
use super::Dense;
use serde::Deserialize;
use std::collections::BTreeMap;

/// Headers larger than this are refused (the format's own limit is 100 MB).
pub const MAX_HEADER: u64 = 100 << 20;

#[derive(Deserialize)]
struct Entry {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: (u64, u64),
}

/// The header's length, from the file's first 8 bytes.
pub fn header_len(first8: &[u8], file_len: u64) -> Result<u64, String> {
    let n = u64::from_le_bytes(first8.try_into().map_err(|_| "file is too short")?);
    if n > MAX_HEADER || 8 + n > file_len {
        return Err(format!(
            "not a .safetensors file (header length {n} for a file of {file_len} bytes)"
        ));
    }
    Ok(n)
}

/// `header` is the JSON after the length prefix.
pub fn parse(header: &[u8], tensor: Option<&str>, file_len: u64) -> Result<Dense, String> {
    let mut all: BTreeMap<String, serde_json::Value> = serde_json::from_slice(header)
        .map_err(|e| format!("the .safetensors header is not valid JSON: {e}"))?;
    all.remove("__metadata__");
    let (name, value) = match tensor {
        Some(name) => all
            .remove_entry(name)
            .ok_or_else(|| format!("has no tensor named {name:?}"))?,
        None if all.len() == 1 => all.pop_first().expect("one entry"),
        None => {
            return Err(format!(
                "holds {} tensors; name one with data.files.tensor",
                all.len()
            ))
        }
    };
    let e: Entry =
        serde_json::from_value(value).map_err(|e| format!("tensor {name:?}: bad entry: {e}"))?;
    let elem = match e.dtype.as_str() {
        "F16" => Elem::F16,
        "BF16" => Elem::Bf16,
        "F32" => Elem::F32,
        "F64" => Elem::F64,
        other => {
            return Err(format!(
                "tensor {name:?} has element type {other}, not a float type"
            ))
        }
    };
    let (rows, d_in) = match e.shape[..] {
        [rows, d_in] => (rows, d_in),
        _ => {
            return Err(format!(
                "tensor {name:?}: expected a 2-D array [N, d_in], found shape {:?}",
                e.shape
            ))
        }
    };
    let offset = 8 + header.len() as u64 + e.data_offsets.0;
    let span = e.data_offsets.1.checked_sub(e.data_offsets.0);
    if span
        != rows
            .checked_mul(d_in)
            .and_then(|n| n.checked_mul(elem.size() as u64))
    {
        return Err(format!(
            "tensor {name:?}: its byte range does not fit its shape and type"
        ));
    }
    Dense::new(rows, d_in, elem, offset, file_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safetensors_headers() {
        let h = br#"{"__metadata__":{"k":"v"},"acts":{"dtype":"BF16","shape":[3,2],"data_offsets":[0,12]}}"#;
        let len = 8 + h.len() as u64 + 12;
        let d = parse(h, None, len).unwrap();
        assert_eq!((d.rows, d.d_in, d.elem), (3, 2, Elem::Bf16));
        assert_eq!(d.offset, 8 + h.len() as u64);
        assert!(parse(h, Some("x"), len)
            .unwrap_err()
            .contains("no tensor named"));
        assert!(parse(h, None, len - 1).unwrap_err().contains("truncated"));
        let ints = br#"{"a":{"dtype":"I64","shape":[3,2],"data_offsets":[0,48]}}"#;
        assert!(parse(ints, None, 1 << 20).unwrap_err().contains("I64"));
        let two = br#"{"a":{"dtype":"F32","shape":[1,1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1,1],"data_offsets":[4,8]}}"#;
        assert!(parse(two, None, 1 << 20)
            .unwrap_err()
            .contains("data.files.tensor"));
        assert!(header_len(&u64::MAX.to_le_bytes(), 100).is_err());
    }
}
