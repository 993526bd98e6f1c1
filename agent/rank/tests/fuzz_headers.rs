//! Bad input, tried (issue 20, section 5): the shard header readers — .npy,
//! .safetensors and .parquet — take arbitrary and mutated bytes and must
//! answer with an error, never a panic, an overflow or an allocation sized
//! by what a header claims. proptest runs each property `PROPTEST_CASES`
//! times (scripts/test.sh sets a bounded count; docs/benchmarks.md gives a
//! longer run's figures).

mod common;

use cohort_rank::data::shard::{npy, safetensors, Format, Selector, Shard};
use cohort_storage::Blob;
use proptest::prelude::*;
use std::io;
use std::sync::{Arc, OnceLock};

/// A shard held in memory.
struct MemBlob(Vec<u8>);

impl Blob for MemBlob {
    fn name(&self) -> &str {
        "fuzzed"
    }
    fn len(&self) -> u64 {
        self.0.len() as u64
    }
    fn read_ranges(&self, ranges: &[(u64, usize)], out: &mut [u8]) -> io::Result<()> {
        let mut at = 0;
        for &(offset, len) in ranges {
            let start = usize::try_from(offset).map_err(io::Error::other)?;
            let part = self
                .0
                .get(start..start.saturating_add(len))
                .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "past the end"))?;
            out[at..at + len].copy_from_slice(part);
            at += len;
        }
        Ok(())
    }
}

/// Opens `bytes` as a shard of `format` and reads every row group's rows,
/// as the rank would. Errors are fine; a panic fails the property.
fn open_and_read(bytes: Vec<u8>, format: Format) {
    let sel = Selector {
        tensor: None,
        column: None,
        d_in: 16,
    };
    if let Ok(shard) = Shard::open(Arc::new(MemBlob(bytes)), format, sel) {
        if let cohort_rank::data::shard::Layout::Parquet(p) = &shard.layout {
            for (rg, rows) in p.row_group_rows().into_iter().enumerate() {
                let _ = p.read_rows(rg, 0, rows.min(64) as usize);
            }
        }
    }
}

/// a.npy, b.safetensors, c.parquet (a list column), d.parquet (float columns).
type Shards = (Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>);

/// Valid shards written by pyarrow and safetensors (tests/make_shards.py),
/// made once, to mutate.
fn valid() -> &'static Shards {
    static SHARDS: OnceLock<Shards> = OnceLock::new();
    SHARDS.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        common::make_shards(&["mixed", &dir.path().display().to_string(), "16", "3"]);
        let read = |name: &str| std::fs::read(dir.path().join("shards").join(name)).unwrap();
        (
            read("a.npy"),
            read("b.safetensors"),
            read("c.parquet"),
            read("d.parquet"),
        )
    })
}

/// `bytes` with up to 8 bytes replaced and possibly cut short.
fn mutated(bytes: &[u8], edits: &[(usize, u8)], cut: Option<usize>) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for &(at, value) in edits {
        if !out.is_empty() {
            let i = at % out.len();
            out[i] = value;
        }
    }
    if let Some(cut) = cut {
        out.truncate(cut % (bytes.len() + 1));
    }
    out
}

fn npy_header() -> impl Strategy<Value = Vec<u8>> {
    let descr = prop_oneof![
        Just("<f4".to_string()),
        Just("<f2".to_string()),
        Just("<f8".to_string()),
        Just("<i4".to_string()),
        "[ -~]{0,6}",
    ];
    let dims = prop::collection::vec(any::<u64>(), 0..4);
    (descr, dims, any::<bool>(), 1u8..4).prop_map(|(descr, dims, fortran, version)| {
        let shape = dims
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let dict = format!(
            "{{'descr': '{descr}', 'fortran_order': {}, 'shape': ({shape}), }}",
            if fortran { "True" } else { "False" }
        );
        let mut head = b"\x93NUMPY".to_vec();
        head.push(version);
        head.push(0);
        if version == 1 {
            head.extend((dict.len() as u16).to_le_bytes());
        } else {
            head.extend((dict.len() as u32).to_le_bytes());
        }
        head.extend(dict.as_bytes());
        head
    })
}

fn safetensors_header() -> impl Strategy<Value = String> {
    let dtype = prop_oneof![
        Just("F32".to_string()),
        Just("F16".to_string()),
        Just("BF16".to_string()),
        Just("F64".to_string()),
        Just("I8".to_string()),
        "[A-Z0-9]{0,4}",
    ];
    let shape = prop::collection::vec(any::<u64>(), 0..4);
    (dtype, shape, any::<u64>(), any::<u64>()).prop_map(|(dtype, shape, a, b)| {
        format!(
            r#"{{"__metadata__":{{"k":"v"}},"acts":{{"dtype":"{dtype}","shape":{shape:?},"data_offsets":[{a},{b}]}}}}"#
        )
    })
}

proptest! {
    #[test]
    fn npy_arbitrary_bytes(head in prop::collection::vec(any::<u8>(), 0..256), len in any::<u64>()) {
        let _ = npy::parse(&head, len);
    }

    #[test]
    fn npy_headers_with_any_shape(head in npy_header(), len in any::<u64>()) {
        let _ = npy::parse(&head, len);
    }

    #[test]
    fn safetensors_lengths(first8 in prop::collection::vec(any::<u8>(), 0..12), len in any::<u64>()) {
        let _ = safetensors::header_len(&first8, len);
    }

    #[test]
    fn safetensors_headers(header in safetensors_header(), len in any::<u64>(), named in any::<bool>()) {
        let _ = safetensors::parse(header.as_bytes(), named.then_some("acts"), len);
    }

    #[test]
    fn safetensors_arbitrary_json(header in prop::collection::vec(any::<u8>(), 0..256), len in any::<u64>()) {
        let _ = safetensors::parse(&header, None, len);
    }

    #[test]
    fn mutated_shards(
        which in 0usize..4,
        edits in prop::collection::vec((any::<usize>(), any::<u8>()), 0..8),
        cut in prop::option::of(any::<usize>()),
    ) {
        let (a, b, c, d) = valid();
        let (bytes, format) = match which {
            0 => (a, Format::Npy),
            1 => (b, Format::Safetensors),
            2 => (c, Format::Parquet),
            _ => (d, Format::Parquet),
        };
        open_and_read(mutated(bytes, &edits, cut), format);
    }

    #[test]
    fn arbitrary_parquet(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let mut file = bytes;
        // Often a well-formed frame around garbage, to reach the footer parser.
        if file.len() > 12 && file[0] % 2 == 0 {
            let n = file.len();
            file[..4].copy_from_slice(b"PAR1");
            file[n - 4..].copy_from_slice(b"PAR1");
            let footer = ((n as u32).saturating_sub(12) / 2).to_le_bytes();
            file[n - 8..n - 4].copy_from_slice(&footer);
        }
        open_and_read(file, Format::Parquet);
    }
}
