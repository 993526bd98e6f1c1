//! What a parquet footer claims, checked before the parquet crate acts on
//! it: the crate asserts (panics) on some impossible values.

use parquet::file::metadata::ParquetMetaData;

/// Every column chunk the footer names must lie inside the file: the
/// parquet crate asserts (panics) on a negative offset or size, and a
/// chunk past the end would be read from nowhere. Found by
/// tests/fuzz_headers.rs.
pub(super) fn check_chunks(meta: &ParquetMetaData, file_len: u64) -> Result<(), String> {
    for (rg, group) in meta.row_groups().iter().enumerate() {
        if group.num_rows() < 0 {
            return Err(format!("row group {rg} has {} rows", group.num_rows()));
        }
        for (c, chunk) in group.columns().iter().enumerate() {
            let start = chunk
                .dictionary_page_offset()
                .unwrap_or_else(|| chunk.data_page_offset());
            let len = chunk.compressed_size();
            let inside = u64::try_from(start)
                .ok()
                .zip(u64::try_from(len).ok())
                .and_then(|(s, l)| s.checked_add(l))
                .is_some_and(|end| end <= file_len);
            if !inside {
                return Err(format!(
                    "not a readable parquet file: row group {rg} column {c} claims bytes {start}..+{len} of a file of {file_len}"
                ));
            }
        }
    }
    Ok(())
}
