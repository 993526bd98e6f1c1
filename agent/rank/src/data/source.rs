//! Forming a batch: the rows of the given sample ids, in order, as bytes of
//! the source's element type. File rows are read by ranges (one read per run
//! of consecutive rows of a shard); parquet rows by decoding the chunk that
//! holds them; synthetic rows are generated.
//!
//! Where a read costs a request or a decode (objects in S3, parquet shards),
//! the rank's rows of a whole shuffle window are read at once when the
//! window begins ([`Source::request_window`], on a thread of its own:
//! `read_ahead.rs`): each chunk is then fetched or decoded once per window
//! instead of once per batch that draws from it, and the next window is read
//! while this one trains. At most three windows are held here, and two more
//! may be on their way.

use super::catalog::Catalog;
use super::elem::Elem;
use super::error::ReadError;
use super::read_ahead::{AheadWindow, ReadAhead};
use super::rows::RowReader;
use super::shard::Layout;
use super::synthetic::Synthetic;
use std::collections::VecDeque;
use std::sync::Arc;

pub enum Source {
    Synthetic(Synthetic, u64),
    Files(Box<FileSource>),
}

pub struct FileSource {
    /// For rows no window read ahead holds.
    direct: RowReader,
    /// AheadWindow windows, oldest first.
    windows: VecDeque<AheadWindow>,
    /// Reads windows ahead on a thread of its own, where reads cost enough
    /// to be worth it (S3 objects or parquet shards).
    ahead: Option<ReadAhead>,
}

/// Windows held at once: the one being read, the next (read ahead), and
/// the previous while a batch still straddles it.
const WINDOWS_HELD: usize = 3;

impl Source {
    pub fn files(catalog: Catalog, chunk: u64) -> Self {
        let ahead = catalog
            .shards
            .iter()
            .any(|s| matches!(s.layout, Layout::Parquet(_)) || s.blob.remote());
        let catalog = Arc::new(catalog);
        Source::Files(Box::new(FileSource {
            direct: RowReader::new(catalog.clone(), chunk),
            windows: VecDeque::new(),
            ahead: ahead.then(|| ReadAhead::spawn(RowReader::new(catalog, chunk))),
        }))
    }

    /// Whether this source reads windows ahead.
    pub fn reads_ahead(&self) -> bool {
        matches!(self, Source::Files(f) if f.ahead.is_some())
    }

    /// Ask for this rank's rows `ids` of window `key` to be read ahead.
    pub fn request_window(&mut self, key: (u64, u64), ids: Vec<u64>) -> Result<(), ReadError> {
        match self {
            Source::Files(f) => match &f.ahead {
                Some(p) => p.request(key, ids),
                None => Ok(()),
            },
            Source::Synthetic(..) => Ok(()),
        }
    }

    /// Wait until window `key` (requested before) is read, and hold it,
    /// dropping the oldest window held.
    pub fn await_window(&mut self, key: (u64, u64)) -> Result<(), ReadError> {
        let Source::Files(f) = self else {
            return Ok(());
        };
        let Some(p) = &f.ahead else {
            return Ok(());
        };
        if f.windows.iter().any(|w| w.key == key) {
            return Ok(());
        }
        let window = p.wait(key)?;
        if f.windows.len() >= WINDOWS_HELD {
            f.windows.pop_front();
        }
        f.windows.push_back(window);
        Ok(())
    }

    pub fn rows(&self) -> u64 {
        match self {
            Source::Synthetic(_, rows) => *rows,
            Source::Files(f) => f.direct.catalog.rows,
        }
    }

    pub fn elem(&self) -> Elem {
        match self {
            Source::Synthetic(..) => Elem::F32,
            Source::Files(f) => f.direct.catalog.elem,
        }
    }

    /// Rows per segment (the runs a chunk never crosses).
    pub fn segment_rows(&self) -> Vec<u64> {
        match self {
            Source::Synthetic(_, rows) => vec![*rows],
            Source::Files(f) => f.direct.catalog.segments.iter().map(|s| s.rows).collect(),
        }
    }

    /// The rows of `ids`, in order, into `out` (`ids.len()` rows of
    /// [`Self::elem`]). Errors name the shard.
    pub fn fill(&mut self, ids: &[u64], d_in: usize, out: &mut [u8]) -> Result<(), ReadError> {
        match self {
            Source::Synthetic(s, _) => {
                let mut row = vec![0f32; d_in];
                for (i, &id) in ids.iter().enumerate() {
                    s.sample(id, &mut row);
                    let dst = &mut out[i * d_in * 4..(i + 1) * d_in * 4];
                    for (o, v) in dst.chunks_exact_mut(4).zip(&row) {
                        o.copy_from_slice(&v.to_le_bytes());
                    }
                }
                Ok(())
            }
            Source::Files(f) => f.fill(ids, out),
        }
    }
}

impl FileSource {
    /// Rows from the windows read ahead; the others (padding, or a source
    /// that does not read ahead) read directly.
    fn fill(&mut self, ids: &[u64], out: &mut [u8]) -> Result<(), ReadError> {
        if self.windows.is_empty() {
            return self.direct.fill(ids, out);
        }
        let rb = self.direct.catalog.row_bytes();
        let mut missing: Vec<(u64, usize)> = Vec::new();
        for (at, &id) in ids.iter().enumerate() {
            let hit = self
                .windows
                .iter()
                .find_map(|w| w.index.get(&id).map(|&i| &w.rows[i * rb..(i + 1) * rb]));
            match hit {
                Some(row) => out[at * rb..(at + 1) * rb].copy_from_slice(row),
                None => missing.push((id, at)),
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        let miss_ids: Vec<u64> = missing.iter().map(|m| m.0).collect();
        let mut rows = vec![0u8; miss_ids.len() * rb];
        self.direct.fill(&miss_ids, &mut rows)?;
        for (i, &(_, at)) in missing.iter().enumerate() {
            out[at * rb..(at + 1) * rb].copy_from_slice(&rows[i * rb..(i + 1) * rb]);
        }
        Ok(())
    }
}
