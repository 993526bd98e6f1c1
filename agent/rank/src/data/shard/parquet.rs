//! Parquet shards, read with the parquet crate's low-level column readers (no
//! Arrow). Two layouts hold a row of `d_in` floats:
//! - one list column (Arrow's FixedSizeList or List of float, as pyarrow and
//!   pandas write them), `data.files.column` or the file's only list column;
//! - `d_in` plain float columns, in schema order.
//!
//! Values may be FLOAT, DOUBLE or FLOAT16 (FIXED_LEN_BYTE_ARRAY(2)); nulls are
//! an error. Rows are decoded a run at a time within one row group; the
//! reader uses ranged reads of the shard, never the whole file.

use super::super::elem::Elem;
use super::super::error::ReadError;
use super::Selector;
use bytes::Bytes;
use cohort_storage::Blob;
use parquet::basic::{LogicalType, Type as Physical};
use parquet::column::reader::{ColumnReader, ColumnReaderImpl};
use parquet::data_type::DataType;
use parquet::file::reader::{ChunkReader, FileReader, Length};
use parquet::file::serialized_reader::SerializedFileReader;
use parquet::schema::types::ColumnDescPtr;
use std::io::{BufReader, Read};
use std::sync::Arc;

/// Ranged reads of a blob, in the shape the parquet crate asks for.
#[derive(Clone)]
struct BlobChunks(Arc<dyn Blob>);

impl Length for BlobChunks {
    fn len(&self) -> u64 {
        self.0.len()
    }
}

/// A `Read` from an offset to the end of the blob, a megabyte at a time.
struct BlobRead {
    blob: Arc<dyn Blob>,
    pos: u64,
}

impl Read for BlobRead {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.blob.len().saturating_sub(self.pos);
        let n = (buf.len() as u64).min(left) as usize;
        if n == 0 {
            return Ok(0);
        }
        self.blob.read_ranges(&[(self.pos, n)], &mut buf[..n])?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl ChunkReader for BlobChunks {
    type T = BufReader<BlobRead>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        Ok(BufReader::with_capacity(
            1 << 20,
            BlobRead {
                blob: self.0.clone(),
                pos: start,
            },
        ))
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let bytes = self
            .0
            .read_at(start, length)
            .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))?;
        Ok(Bytes::from(bytes))
    }
}

/// Where a row's values are.
#[derive(Debug, Clone)]
enum Columns {
    /// One repeated leaf column: `d_in` values per record.
    List(usize),
    /// `d_in` leaf columns, one value each.
    Plain(Vec<usize>),
}

pub struct ParquetShard {
    reader: SerializedFileReader<BlobChunks>,
    columns: Columns,
    elem: Elem,
    d_in: u64,
    row_groups: Vec<u64>,
}

fn elem_of(col: &ColumnDescPtr) -> Option<Elem> {
    match col.physical_type() {
        Physical::FLOAT => Some(Elem::F32),
        Physical::DOUBLE => Some(Elem::F64),
        Physical::FIXED_LEN_BYTE_ARRAY
            if col.type_length() == 2 && col.logical_type_ref() == Some(&LogicalType::Float16) =>
        {
            Some(Elem::F16)
        }
        _ => None,
    }
}

impl ParquetShard {
    /// Reads the footer and checks the layout. As with the pages, a panic
    /// of the parquet crate on a crafted footer is this shard's error.
    pub fn open(blob: Arc<dyn Blob>, sel: Selector) -> Result<Self, String> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Self::open_unguarded(blob, sel)
        }))
        .unwrap_or_else(|_| Err("not a readable parquet file: its footer cannot be decoded".into()))
    }

    fn open_unguarded(blob: Arc<dyn Blob>, sel: Selector) -> Result<Self, String> {
        let file_len = blob.len();
        let reader = SerializedFileReader::new(BlobChunks(blob))
            .map_err(|e| format!("not a readable parquet file: {e}"))?;
        super::footer::check_chunks(reader.metadata(), file_len)?;
        let meta = reader.metadata();
        let schema = meta.file_metadata().schema_descr();
        let leaves = schema.columns();
        let top = |c: &ColumnDescPtr| c.path().parts()[0].clone();
        let lists: Vec<usize> = (0..leaves.len())
            .filter(|&i| leaves[i].max_rep_level() == 1)
            .filter(|&i| sel.column.is_none_or(|name| top(&leaves[i]) == name))
            .collect();
        let (columns, elem) = match (sel.column, &lists[..]) {
            (_, [i]) => {
                let elem = elem_of(&leaves[*i]).ok_or_else(|| {
                    format!(
                        "list column {:?} holds {:?} values, not floats",
                        top(&leaves[*i]),
                        leaves[*i].physical_type()
                    )
                })?;
                (Columns::List(*i), elem)
            }
            (Some(name), []) => return Err(format!("has no list column named {name:?}")),
            (None, []) => plain_columns(leaves, sel.d_in)?,
            (_, many) => {
                return Err(format!(
                    "has {} list columns; name one with data.files.column",
                    many.len()
                ))
            }
        };
        let row_groups: Vec<u64> = meta
            .row_groups()
            .iter()
            .map(|rg| rg.num_rows().max(0) as u64)
            .collect();
        let d_in = match &columns {
            Columns::Plain(cols) => cols.len() as u64,
            // The width of a list column shows only in its data: the first
            // row tells, and every row read later is checked against it.
            Columns::List(_) => 0,
        };
        let mut shard = Self {
            reader,
            columns,
            elem,
            d_in,
            row_groups,
        };
        if shard.d_in == 0 {
            // The footer says how wide rows are on average: wider than
            // model.d_in is refused before any row is decoded, so a crafted
            // file cannot make the first row hold millions of values.
            shard.check_width_cap(sel.d_in)?;
            shard.d_in = shard.first_row_width().map_err(|e| e.to_string())?;
        }
        shard.check_list_widths()?;
        Ok(shard)
    }

    pub fn rows(&self) -> u64 {
        self.row_groups.iter().sum()
    }

    pub fn d_in(&self) -> u64 {
        self.d_in
    }

    pub fn elem(&self) -> Elem {
        self.elem
    }

    pub fn row_group_rows(&self) -> Vec<u64> {
        self.row_groups.clone()
    }

    /// A list column's values per row group must be rows x d_in: ragged or
    /// null rows show here, in the footer, before any data is read.
    fn check_list_widths(&self) -> Result<(), String> {
        let Columns::List(col) = self.columns else {
            return Ok(());
        };
        let meta = self.reader.metadata();
        for (rg, rows) in self.row_groups.iter().enumerate() {
            let values = meta.row_group(rg).column(col).num_values().max(0) as u64;
            if values != rows * self.d_in {
                return Err(format!(
                    "row group {rg}: its {rows} rows hold {values} values, not {} x {}: rows do not all hold {} values",
                    rows, self.d_in, self.d_in
                ));
            }
        }
        Ok(())
    }

    /// A list column whose row groups hold more than `cap` values per row
    /// (`model.d_in`; 0: no cap) is refused from the footer alone.
    fn check_width_cap(&self, cap: u64) -> Result<(), String> {
        let Columns::List(col) = self.columns else {
            return Ok(());
        };
        if cap == 0 {
            return Ok(());
        }
        let meta = self.reader.metadata();
        for (rg, &rows) in self.row_groups.iter().enumerate() {
            let values = meta.row_group(rg).column(col).num_values().max(0) as u64;
            if values > rows.saturating_mul(cap) {
                return Err(format!(
                    "row group {rg}: its {rows} rows hold {values} values, more than {cap} (model.d_in) per row: rows do not all hold {cap} values"
                ));
            }
        }
        Ok(())
    }

    fn first_row_width(&self) -> Result<u64, ReadError> {
        let Some(rg) = self.row_groups.iter().position(|&n| n > 0) else {
            return Ok(0);
        };
        let Columns::List(col) = self.columns else {
            unreachable!("plain columns know their width")
        };
        let values = self.read_column(rg, col, 0, 1, None)?;
        Ok((values.len() / self.elem.size()) as u64)
    }

    /// Rows `start..start + n` of row group `rg`, as `n x d_in` values of
    /// [`Self::elem`] in little-endian bytes.
    pub fn read_rows(&self, rg: usize, start: u64, n: usize) -> Result<Vec<u8>, ReadError> {
        match &self.columns {
            Columns::List(col) => {
                let width = self.d_in as usize;
                self.read_column(rg, *col, start, n, Some(width))
            }
            Columns::Plain(cols) => {
                let size = self.elem.size();
                let d_in = cols.len();
                let mut out = vec![0u8; n * d_in * size];
                for (j, &col) in cols.iter().enumerate() {
                    let values = self.read_column(rg, col, start, n, Some(1))?;
                    for (i, v) in values.chunks_exact(size).enumerate() {
                        let at = (i * d_in + j) * size;
                        out[at..at + size].copy_from_slice(v);
                    }
                }
                Ok(out)
            }
        }
    }

    /// The values of `n` records of one leaf column, checking that each
    /// record holds `width` values (when given) and that none is null.
    fn read_column(
        &self,
        rg: usize,
        col: usize,
        start: u64,
        n: usize,
        width: Option<usize>,
    ) -> Result<Vec<u8>, ReadError> {
        // The parquet crate asserts on some malformed pages (a dictionary-
        // encoded page without a dictionary, found by tests/fuzz_headers.rs):
        // a shard's bytes must never panic the rank, so its decoder's
        // panics are this shard's data error.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.read_column_unguarded(rg, col, start, n, width)
        }))
        .unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("a malformed page");
            Err(ReadError::Data(format!(
                "row group {rg}: column {col} cannot be decoded: {what}"
            )))
        })
    }

    fn read_column_unguarded(
        &self,
        rg: usize,
        col: usize,
        start: u64,
        n: usize,
        width: Option<usize>,
    ) -> Result<Vec<u8>, ReadError> {
        let bad = |e: parquet::errors::ParquetError| match e {
            // Our own ranged reads failed: the storage, not the data.
            parquet::errors::ParquetError::External(e) => {
                ReadError::Io(format!("row group {rg}: {e}"))
            }
            e => ReadError::Data(format!("row group {rg}: {e}")),
        };
        let group = self.reader.get_row_group(rg).map_err(bad)?;
        let reader = group.get_column_reader(col).map_err(bad)?;
        let (values, defs, reps): (Vec<u8>, _, _) = match reader {
            ColumnReader::FloatColumnReader(r) => {
                let (v, d, p) = records(r, start, n).map_err(bad)?;
                (v.iter().flat_map(|x| x.to_le_bytes()).collect(), d, p)
            }
            ColumnReader::DoubleColumnReader(r) => {
                let (v, d, p) = records(r, start, n).map_err(bad)?;
                (v.iter().flat_map(|x| x.to_le_bytes()).collect(), d, p)
            }
            ColumnReader::FixedLenByteArrayColumnReader(r) => {
                let (v, d, p) = records(r, start, n).map_err(bad)?;
                (v.iter().flat_map(|x| x.data().to_vec()).collect(), d, p)
            }
            _ => {
                return Err(ReadError::Data(format!(
                    "column {col} does not hold floats"
                )))
            }
        };
        let desc = self
            .reader
            .metadata()
            .file_metadata()
            .schema_descr()
            .column(col);
        if desc.max_def_level() > 0 && defs.iter().any(|&d| d < desc.max_def_level()) {
            return Err(ReadError::Data(format!(
                "row group {rg}: column {:?} has null or empty values",
                desc.path().string()
            )));
        }
        let count = values.len() / self.elem.size();
        let records = if desc.max_rep_level() > 0 {
            reps.iter().filter(|&&r| r == 0).count()
        } else {
            count
        };
        if records != n {
            return Err(ReadError::Data(format!(
                "row group {rg}: asked for {n} rows at {start}, found {records}"
            )));
        }
        if let Some(w) = width {
            if count != n * w {
                return Err(ReadError::Data(format!(
                    "row group {rg}: rows of column {:?} do not all hold {w} values",
                    desc.path().string()
                )));
            }
        }
        Ok(values)
    }
}

type Records<T> = (Vec<T>, Vec<i16>, Vec<i16>);

/// Skip `start` records, then read `n` (with their levels).
fn records<T: DataType>(
    mut r: ColumnReaderImpl<T>,
    start: u64,
    n: usize,
) -> parquet::errors::Result<Records<T::T>>
where
    ColumnReaderImpl<T>: ReadInto<T::T>,
{
    let mut skipped = 0;
    while skipped < start as usize {
        let s = r.skip_records(start as usize - skipped)?;
        if s == 0 {
            break;
        }
        skipped += s;
    }
    let (mut values, mut defs, mut reps) = (Vec::new(), Vec::new(), Vec::new());
    let mut read = 0;
    while read < n {
        let got = r.read_into(n - read, &mut defs, &mut reps, &mut values)?;
        if got == 0 {
            break;
        }
        read += got;
    }
    Ok((values, defs, reps))
}

/// `read_records` for the value buffers we use (each type's buffer is a Vec).
trait ReadInto<V> {
    fn read_into(
        &mut self,
        n: usize,
        defs: &mut Vec<i16>,
        reps: &mut Vec<i16>,
        values: &mut Vec<V>,
    ) -> parquet::errors::Result<usize>;
}

impl<T: DataType> ReadInto<T::T> for ColumnReaderImpl<T>
where
    T::T: Clone,
{
    fn read_into(
        &mut self,
        n: usize,
        defs: &mut Vec<i16>,
        reps: &mut Vec<i16>,
        values: &mut Vec<T::T>,
    ) -> parquet::errors::Result<usize> {
        let (records, _, _) = self.read_records(n, Some(defs), Some(reps), values)?;
        Ok(records)
    }
}

/// The layout of `d_in` plain float columns.
fn plain_columns(leaves: &[ColumnDescPtr], d_in: u64) -> Result<(Columns, Elem), String> {
    let floats: Vec<usize> = (0..leaves.len())
        .filter(|&i| leaves[i].max_rep_level() == 0 && elem_of(&leaves[i]).is_some())
        .collect();
    if floats.is_empty() {
        return Err("has neither a list column nor float columns".into());
    }
    if floats.len() as u64 != d_in {
        return Err(format!(
            "has no list column and {} float columns, but model.d_in is {d_in}",
            floats.len()
        ));
    }
    let elems: Vec<Elem> = floats.iter().filter_map(|&i| elem_of(&leaves[i])).collect();
    if elems.windows(2).any(|w| w[0] != w[1]) {
        return Err("its float columns are not all of one type".into());
    }
    Ok((Columns::Plain(floats), elems[0]))
}
