//! Forming a batch: the rows of the given sample ids, in order, as bytes of
//! the source's element type. File rows are read by ranges (one read per run
//! of consecutive rows of a shard); parquet rows by decoding the chunk that
//! holds them; synthetic rows are generated.
//!
//! Where a read costs a request or a decode (objects in S3, parquet shards),
//! the rank's rows of a whole shuffle window are read at once when the
//! window begins ([`Source::preload`]): each chunk is then fetched or decoded
//! once per window instead of once per batch that draws from it. The next
//! window is read one window ahead; at most three are held.

use super::catalog::Catalog;
use super::elem::{convert, Elem};
use super::shard::Layout;
use super::store::{coalesce, ReadError};
use super::synthetic::Synthetic;
use std::collections::VecDeque;

pub enum Source {
    Synthetic(Synthetic, u64),
    Files(Box<FileSource>),
}

pub struct FileSource {
    pub catalog: Catalog,
    chunk: u64,
    /// Decoded parquet chunks: ((segment, chunk within it), bytes), newest last.
    decoded: VecDeque<((usize, u64), Vec<u8>)>,
    decoded_cap: usize,
    /// Preloaded windows: (epoch, window), row index by sample id, the rows.
    windows: VecDeque<Preloaded>,
    /// Whether reads cost enough to preload windows (S3 or parquet shards).
    preload: bool,
}

struct Preloaded {
    key: (u64, u64),
    index: std::collections::HashMap<u64, usize>,
    rows: Vec<u8>,
}

/// Windows held at once: the one being read, the next (read ahead), and
/// the previous while a batch still straddles it.
const PRELOADED_WINDOWS: usize = 3;

impl Source {
    pub fn files(catalog: Catalog, chunk: u64) -> Self {
        let preload = catalog
            .shards
            .iter()
            .any(|s| matches!(s.layout, Layout::Parquet(_)) || s.blob.name().starts_with("s3://"));
        Source::Files(Box::new(FileSource {
            catalog,
            chunk,
            decoded: VecDeque::new(),
            // Preloading reads a window's rows in order: a chunk at a time.
            decoded_cap: 2,
            windows: VecDeque::new(),
            preload,
        }))
    }

    /// Whether [`Self::preload`] pays off for this source.
    pub fn wants_preload(&self) -> bool {
        matches!(self, Source::Files(f) if f.preload)
    }

    /// Read the rows of `ids` (this rank's samples of window `key`) ahead,
    /// dropping the oldest window held.
    pub fn preload(&mut self, key: (u64, u64), ids: &[u64]) -> Result<(), ReadError> {
        let Source::Files(f) = self else {
            return Ok(());
        };
        if f.windows.iter().any(|w| w.key == key) {
            return Ok(());
        }
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let mut rows = vec![0u8; ids.len() * f.catalog.row_bytes()];
        f.fill_direct(&ids, &mut rows)?;
        let index = ids.iter().enumerate().map(|(i, &id)| (id, i)).collect();
        if f.windows.len() >= PRELOADED_WINDOWS {
            f.windows.pop_front();
        }
        f.windows.push_back(Preloaded { key, index, rows });
        Ok(())
    }

    pub fn rows(&self) -> u64 {
        match self {
            Source::Synthetic(_, rows) => *rows,
            Source::Files(f) => f.catalog.rows,
        }
    }

    pub fn elem(&self) -> Elem {
        match self {
            Source::Synthetic(..) => Elem::F32,
            Source::Files(f) => f.catalog.elem,
        }
    }

    /// Rows per segment (the runs a chunk never crosses).
    pub fn segment_rows(&self) -> Vec<u64> {
        match self {
            Source::Synthetic(_, rows) => vec![*rows],
            Source::Files(f) => f.catalog.segments.iter().map(|s| s.rows).collect(),
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

/// The reads of one dense shard for a batch: merged byte ranges, and the
/// rows (offset in the shard, position in the batch) they serve.
struct DenseRead {
    shard: usize,
    runs: Vec<(u64, u64)>,
    rows: Vec<(u64, usize)>,
}

/// Shards read at once for one batch (object storage gains from it; a local
/// file system does not mind).
const PARALLEL_READS: usize = 8;

impl FileSource {
    /// Rows from the preloaded windows; the others (padding, or a source
    /// that does not preload) read directly.
    fn fill(&mut self, ids: &[u64], out: &mut [u8]) -> Result<(), ReadError> {
        if self.windows.is_empty() {
            return self.fill_direct(ids, out);
        }
        let rb = self.catalog.row_bytes();
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
        self.fill_direct(&miss_ids, &mut rows)?;
        for (i, &(_, at)) in missing.iter().enumerate() {
            out[at * rb..(at + 1) * rb].copy_from_slice(&rows[i * rb..(i + 1) * rb]);
        }
        Ok(())
    }

    fn fill_direct(&mut self, ids: &[u64], out: &mut [u8]) -> Result<(), ReadError> {
        // (segment, row within the data set, where it goes), in row order.
        let mut wanted: Vec<(usize, u64, usize)> = ids
            .iter()
            .enumerate()
            .map(|(at, &id)| (self.catalog.segment_of(id), id, at))
            .collect();
        wanted.sort_unstable_by_key(|w| (w.1, w.2));
        let mut dense: Vec<DenseRead> = Vec::new();
        let mut i = 0;
        while i < wanted.len() {
            let seg = wanted[i].0;
            let end = wanted[i..].partition_point(|w| w.0 == seg) + i;
            let segment = self.catalog.segments[seg];
            let shard = &self.catalog.shards[segment.shard as usize];
            match &shard.layout {
                Layout::Dense(d) => {
                    let rb = d.row_bytes();
                    let at = |row: u64| d.offset + (segment.shard_row + row - segment.first) * rb;
                    let rows: Vec<(u64, usize)> =
                        wanted[i..end].iter().map(|w| (at(w.1), w.2)).collect();
                    let runs = coalesce(rows.iter().map(|&(o, _)| (o, o + rb)).collect());
                    match dense.last_mut() {
                        Some(last) if last.shard == segment.shard as usize => {
                            last.rows.extend(rows);
                            last.runs = coalesce(last.runs.drain(..).chain(runs).collect());
                        }
                        _ => dense.push(DenseRead {
                            shard: segment.shard as usize,
                            runs,
                            rows,
                        }),
                    }
                }
                Layout::Parquet(_) => {
                    for &(_, id, at) in &wanted[i..end] {
                        self.fill_parquet_row(seg, id, at, out)?;
                    }
                }
            }
            i = end;
        }
        for reads in dense.chunks(PARALLEL_READS) {
            let bufs: Vec<Result<Vec<u8>, ReadError>> = std::thread::scope(|scope| {
                let handles: Vec<_> = reads
                    .iter()
                    .map(|r| scope.spawn(|| self.read_dense(r)))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("a read thread panicked"))
                    .collect()
            });
            for (r, buf) in reads.iter().zip(bufs) {
                self.scatter(r, &buf?, out);
            }
        }
        Ok(())
    }

    fn read_dense(&self, r: &DenseRead) -> Result<Vec<u8>, ReadError> {
        let shard = &self.catalog.shards[r.shard];
        let total: u64 = r.runs.iter().map(|(s, e)| e - s).sum();
        let mut buf = vec![0u8; total as usize];
        let ranges: Vec<(u64, usize)> =
            r.runs.iter().map(|&(s, e)| (s, (e - s) as usize)).collect();
        shard
            .blob
            .read_ranges(&ranges, &mut buf)
            .map_err(|e| ReadError::Io(format!("{}: {e}", shard.blob.name())))?;
        Ok(buf)
    }

    /// Copy each row of `r` from the runs read into `buf` to its place.
    fn scatter(&self, r: &DenseRead, buf: &[u8], out: &mut [u8]) {
        let Layout::Dense(d) = &self.catalog.shards[r.shard].layout else {
            unreachable!("dense reads are of dense shards")
        };
        let rb = d.row_bytes() as usize;
        let row_bytes = self.catalog.row_bytes();
        let mut starts = Vec::with_capacity(r.runs.len());
        let mut pos = 0u64;
        for (s, e) in &r.runs {
            starts.push((*s, pos));
            pos += e - s;
        }
        for &(off, at) in &r.rows {
            let k = starts.partition_point(|(s, _)| *s <= off) - 1;
            let src = (starts[k].1 + off - starts[k].0) as usize;
            convert(
                d.elem,
                &buf[src..src + rb],
                self.catalog.elem,
                &mut out[at * row_bytes..(at + 1) * row_bytes],
            );
        }
    }

    /// Row `id` of parquet segment `seg` into batch position `at`, decoding
    /// its chunk unless it is among the decoded ones.
    fn fill_parquet_row(
        &mut self,
        seg: usize,
        id: u64,
        at: usize,
        out: &mut [u8],
    ) -> Result<(), ReadError> {
        let segment = self.catalog.segments[seg];
        let shard = &self.catalog.shards[segment.shard as usize];
        let Layout::Parquet(p) = &shard.layout else {
            unreachable!("parquet rows are of parquet shards")
        };
        let row_bytes = self.catalog.row_bytes();
        let rb = p.d_in() as usize * p.elem().size();
        let in_seg = id - segment.first;
        let k = in_seg / self.chunk;
        let key = (seg, k);
        if !self.decoded.iter().any(|(c, _)| *c == key) {
            let start = k * self.chunk;
            let n = self.chunk.min(segment.rows - start) as usize;
            let rows = p
                .read_rows(segment.index as usize, start, n)
                .map_err(|e| e.in_shard(shard.blob.name()))?;
            if self.decoded.len() >= self.decoded_cap {
                self.decoded.pop_front();
            }
            self.decoded.push_back((key, rows));
        }
        let (_, rows) = self
            .decoded
            .iter()
            .find(|(c, _)| *c == key)
            .expect("decoded above");
        let src = ((in_seg - k * self.chunk) as usize) * rb;
        convert(
            p.elem(),
            &rows[src..src + rb],
            self.catalog.elem,
            &mut out[at * row_bytes..(at + 1) * row_bytes],
        );
        Ok(())
    }
}
