//! Reading rows of the catalog straight from the shards: ranged reads of
//! dense shards (runs of consecutive rows merged, up to 8 shards at once) and
//! parquet rows by decoding the chunk that holds them.

use super::catalog::Catalog;
use super::elem::convert;
use super::error::ReadError;
use super::shard::Layout;
use cohort_storage::coalesce;
use std::collections::VecDeque;
use std::sync::Arc;

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

/// One reader of the data set (each thread that reads has its own).
pub struct RowReader {
    pub catalog: Arc<Catalog>,
    chunk: u64,
    /// Decoded parquet chunks: ((segment, chunk within it), bytes), newest
    /// last. Rows are asked for in order, so two suffice.
    decoded: VecDeque<((usize, u64), Vec<u8>)>,
}

/// Decoded parquet chunks kept.
const DECODED_CHUNKS: usize = 2;

impl RowReader {
    pub fn new(catalog: Arc<Catalog>, chunk: u64) -> Self {
        Self {
            catalog,
            chunk,
            decoded: VecDeque::new(),
        }
    }

    /// The rows of `ids`, in order, into `out`.
    pub fn fill(&mut self, ids: &[u64], out: &mut [u8]) -> Result<(), ReadError> {
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
            if self.decoded.len() >= DECODED_CHUNKS {
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
