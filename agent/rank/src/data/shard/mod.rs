//! One shard: its header read once, at start, into where its rows are and
//! what they hold. Formats: `.npy`, `.safetensors` (rows stored densely at
//! one offset) and `.parquet` (rows in compressed row groups).

mod footer;
pub mod npy;
pub mod parquet;
pub mod safetensors;

use super::elem::Elem;
use cohort_storage::Blob;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Npy,
    Safetensors,
    Parquet,
}

impl Format {
    /// From a file name; `None` for anything that is not a shard.
    pub fn of(name: &str) -> Option<Self> {
        let ext = name.rsplit_once('.')?.1;
        match ext {
            "npy" => Some(Format::Npy),
            "safetensors" => Some(Format::Safetensors),
            "parquet" => Some(Format::Parquet),
            _ => None,
        }
    }
}

/// Rows stored back to back from `offset`, row-major.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dense {
    pub rows: u64,
    pub d_in: u64,
    pub elem: Elem,
    pub offset: u64,
}

impl Dense {
    /// Checks that the file holds every row the header promises.
    fn new(rows: u64, d_in: u64, elem: Elem, offset: u64, file_len: u64) -> Result<Self, String> {
        let need = rows
            .checked_mul(d_in)
            .and_then(|n| n.checked_mul(elem.size() as u64))
            .and_then(|n| n.checked_add(offset))
            .ok_or("its shape overflows")?;
        if need > file_len {
            return Err(format!(
                "is truncated: the header promises {rows} x {d_in} {} values ({need} bytes), the file has {file_len}",
                elem.name()
            ));
        }
        Ok(Self {
            rows,
            d_in,
            elem,
            offset,
        })
    }

    pub fn row_bytes(&self) -> u64 {
        self.d_in * self.elem.size() as u64
    }
}

pub enum Layout {
    Dense(Dense),
    Parquet(parquet::ParquetShard),
}

/// A shard ready to read from.
pub struct Shard {
    pub blob: Arc<dyn Blob>,
    pub layout: Layout,
}

/// What a shard's header must be read with.
#[derive(Debug, Clone, Copy, Default)]
pub struct Selector<'a> {
    /// The safetensors tensor (`data.files.tensor`).
    pub tensor: Option<&'a str>,
    /// The parquet column (`data.files.column`).
    pub column: Option<&'a str>,
    /// `model.d_in`, for the parquet layout of d_in float columns.
    pub d_in: u64,
}

impl Shard {
    /// Read the header of `blob` (a shard of `format`). Errors say what is
    /// wrong; the caller names the shard.
    pub fn open(blob: Arc<dyn Blob>, format: Format, sel: Selector) -> Result<Self, String> {
        let len = blob.len();
        if len == 0 {
            return Err("file is empty".into());
        }
        let io = |e: std::io::Error| format!("cannot read: {e}");
        let layout = match format {
            Format::Npy => {
                let head = blob.read_at(0, npy::probe_len(len)).map_err(io)?;
                Layout::Dense(npy::parse(&head, len)?)
            }
            Format::Safetensors => {
                let first = blob.read_at(0, 8.min(len as usize)).map_err(io)?;
                let n = safetensors::header_len(&first, len)?;
                let header = blob.read_at(8, n as usize).map_err(io)?;
                Layout::Dense(safetensors::parse(&header, sel.tensor, len)?)
            }
            Format::Parquet => Layout::Parquet(parquet::ParquetShard::open(blob.clone(), sel)?),
        };
        Ok(Self { blob, layout })
    }

    pub fn rows(&self) -> u64 {
        match &self.layout {
            Layout::Dense(d) => d.rows,
            Layout::Parquet(p) => p.rows(),
        }
    }

    pub fn d_in(&self) -> u64 {
        match &self.layout {
            Layout::Dense(d) => d.d_in,
            Layout::Parquet(p) => p.d_in(),
        }
    }

    pub fn elem(&self) -> Elem {
        match &self.layout {
            Layout::Dense(d) => d.elem,
            Layout::Parquet(p) => p.elem(),
        }
    }

    /// Lengths of the runs of rows a chunk never crosses: the whole shard,
    /// or each parquet row group.
    pub fn segments(&self) -> Vec<u64> {
        match &self.layout {
            Layout::Dense(d) => vec![d.rows],
            Layout::Parquet(p) => p.row_group_rows(),
        }
    }
}
