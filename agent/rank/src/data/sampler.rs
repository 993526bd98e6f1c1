//! Which samples each rank reads, and when: DistributedSampler semantics at
//! any data-set size, without materialising a permutation of the data set.
//!
//! An epoch's order is built from *chunks* (`data.shuffle_chunk` consecutive
//! rows; chunks never cross a shard or a parquet row group):
//! 1. the chunks are permuted by a keyed Feistel network over the chunk
//!    indices (a bijection computed per index: O(1) memory at any size),
//!    seeded by `seed` and the epoch;
//! 2. consecutive permuted chunks are grouped into *windows* of about
//!    `data.shuffle_buffer` samples, and each window's samples are shuffled
//!    uniformly (Fisher-Yates, seeded by seed, epoch and window).
//!
//! The order does not depend on the world size. Optimizer steps take the
//! order's positions in consecutive spans of the global batch
//! `G = B*W*A` (micro-batch `B` per rank, `W` ranks, `A` micro-batches a
//! step): step `s` of an epoch reads `[s*G, (s+1)*G)`, its micro-batch `m`
//! the positions `[s*G + m*B*W, s*G + (m+1)*B*W)`, and rank `r` the `r`-th
//! slice of `B` of that. So a step's samples depend on `G` alone, never on
//! how it is split: `W` ranks at batch `B` read exactly what one rank reads
//! at batch `B*W`, and an elastic training resized between steps reads what
//! a fixed one would have. Every step is whole: the epoch's last step is
//! completed by wrapping around to the epoch's first positions (fewer than
//! `G` samples twice), every sample is seen at least once per epoch, and a
//! step's samples are a pure function of (seed, epoch, step, `G`): resuming
//! at a step, at any split of `G`, reads exactly what the uninterrupted run
//! would have read.

/// SplitMix64: a small, well-mixed, portable generator.
#[derive(Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// Uniform in 0..bound (bound > 0), without modulo bias.
    pub fn below(&mut self, bound: u64) -> u64 {
        let zone = u64::MAX - u64::MAX % bound;
        loop {
            let x = self.next_u64();
            if x < zone {
                return x % bound;
            }
        }
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// SplitMix64's finaliser: a good 64-bit hash.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A keyed pseudo-random permutation of `0..n`: a 4-round balanced Feistel
/// network over the smallest even number of bits that covers `n`, walking
/// the cycle until the value falls inside (fewer than 4 rounds on average).
pub struct Feistel {
    n: u64,
    half: u32,
    keys: [u64; 4],
}

impl Feistel {
    pub fn new(n: u64, key: u64) -> Self {
        let bits = 64 - n.saturating_sub(1).leading_zeros();
        let half = bits.div_ceil(2).max(1);
        let mut rng = SplitMix64(key);
        Self {
            n,
            half,
            keys: [
                rng.next_u64(),
                rng.next_u64(),
                rng.next_u64(),
                rng.next_u64(),
            ],
        }
    }

    pub fn apply(&self, mut x: u64) -> u64 {
        debug_assert!(x < self.n);
        let mask = (1u64 << self.half) - 1;
        loop {
            let (mut l, mut r) = (x >> self.half, x & mask);
            for k in self.keys {
                (l, r) = (r, l ^ (mix(r ^ k) & mask));
            }
            x = (l << self.half) | r;
            if x < self.n {
                return x;
            }
        }
    }
}

/// The data set as the sampler sees it: runs of rows (segments) split into
/// chunks of at most `chunk` rows.
#[derive(Debug, Clone)]
pub struct ChunkTable {
    /// (first row, rows) of each segment, in row order.
    segments: Vec<(u64, u64)>,
    /// Index of each segment's first chunk; one more entry: the chunk count.
    first_chunk: Vec<u64>,
    chunk: u64,
}

impl ChunkTable {
    pub fn new(segment_rows: impl IntoIterator<Item = u64>, chunk: u64) -> Self {
        let (mut segments, mut first_chunk) = (Vec::new(), vec![0]);
        let (mut row, mut chunks) = (0, 0);
        for rows in segment_rows.into_iter().filter(|&r| r > 0) {
            segments.push((row, rows));
            row += rows;
            chunks += rows.div_ceil(chunk);
            first_chunk.push(chunks);
        }
        Self {
            segments,
            first_chunk,
            chunk,
        }
    }

    pub fn chunks(&self) -> u64 {
        *self.first_chunk.last().expect("one entry at least")
    }

    pub fn rows(&self) -> u64 {
        self.segments.last().map_or(0, |(first, rows)| first + rows)
    }

    /// (first row, rows) of chunk `c`.
    pub fn chunk(&self, c: u64) -> (u64, u64) {
        let s = self.first_chunk.partition_point(|&f| f <= c) - 1;
        let (first, rows) = self.segments[s];
        let at = (c - self.first_chunk[s]) * self.chunk;
        (first + at, self.chunk.min(rows - at))
    }
}

/// One epoch's order, computed lazily: positions `0..rows` to sample ids.
pub struct EpochOrder<'a> {
    table: &'a ChunkTable,
    chunks: Feistel,
    window_chunks: u64,
    /// First position of each window; one more entry: the row count.
    window_start: Vec<u64>,
    key: u64,
    /// The window last asked for: its index, chunk starts and lengths
    /// (prefix), and the shuffle of its positions.
    cached: Option<Window>,
}

struct Window {
    index: u64,
    chunk_first_row: Vec<u64>,
    chunk_prefix: Vec<u64>,
    shuffle: Vec<u32>,
}

impl<'a> EpochOrder<'a> {
    /// O(chunks) time, O(chunks / window_chunks) memory.
    pub fn new(table: &'a ChunkTable, seed: u64, epoch: u64, window_chunks: u64) -> Self {
        let key = mix(seed ^ mix(epoch.wrapping_add(0xE90C)));
        let chunks = Feistel::new(table.chunks(), key);
        let mut window_start = vec![0];
        let mut at = 0;
        for c in 0..table.chunks() {
            at += table.chunk(chunks.apply(c)).1;
            if (c + 1) % window_chunks == 0 || c + 1 == table.chunks() {
                window_start.push(at);
            }
        }
        Self {
            table,
            chunks,
            window_chunks,
            window_start,
            key,
            cached: None,
        }
    }

    /// How many windows the epoch has.
    pub fn windows(&self) -> u64 {
        self.window_start.len() as u64 - 1
    }

    /// The window holding position `pos` (< rows).
    pub fn window_of(&self, pos: u64) -> u64 {
        self.window_start.partition_point(|&s| s <= pos) as u64 - 1
    }

    /// The positions of window `w`.
    pub fn window_range(&self, w: u64) -> std::ops::Range<u64> {
        self.window_start[w as usize]..self.window_start[w as usize + 1]
    }

    /// The sample at position `pos` (< rows) of this epoch.
    pub fn sample_at(&mut self, pos: u64) -> u64 {
        let w = self.window_of(pos);
        if self.cached.as_ref().is_none_or(|c| c.index != w) {
            self.cached = Some(self.window(w));
        }
        let win = self.cached.as_ref().expect("cached window");
        let q = win.shuffle[(pos - self.window_start[w as usize]) as usize] as u64;
        let i = win.chunk_prefix.partition_point(|&p| p <= q) - 1;
        win.chunk_first_row[i] + (q - win.chunk_prefix[i])
    }

    fn window(&self, w: u64) -> Window {
        let first = w * self.window_chunks;
        let last = (first + self.window_chunks).min(self.table.chunks());
        let (mut chunk_first_row, mut chunk_prefix) = (Vec::new(), vec![0]);
        for c in first..last {
            let (row, rows) = self.table.chunk(self.chunks.apply(c));
            chunk_first_row.push(row);
            chunk_prefix.push(chunk_prefix.last().expect("one entry") + rows);
        }
        let len = *chunk_prefix.last().expect("one entry");
        let mut shuffle: Vec<u32> = (0..len as u32).collect();
        let mut rng = SplitMix64(mix(self.key ^ mix(w.wrapping_add(0x3A11))));
        for i in (1..shuffle.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            shuffle.swap(i, j);
        }
        Window {
            index: w,
            chunk_first_row,
            chunk_prefix,
            shuffle,
        }
    }
}

/// One rank's view of the order.
#[derive(Debug, Clone)]
pub struct DistributedSampler {
    pub num_samples: i64,
    pub world_size: i64,
    pub rank: i64,
    pub seed: u64,
    /// Rows per rank and micro-batch.
    pub batch_size: i64,
    /// Micro-batches per optimizer step.
    pub accumulation: i64,
}

impl DistributedSampler {
    /// Samples per optimizer step, over all ranks and micro-batches.
    pub fn global_batch(&self) -> i64 {
        self.batch_size * self.world_size * self.accumulation
    }

    /// Optimizer steps per epoch (the last completed by wrapping around).
    pub fn steps_per_epoch(&self) -> i64 {
        (self.num_samples + self.global_batch() - 1) / self.global_batch()
    }

    /// Micro-batches per epoch.
    fn batches_per_epoch(&self) -> i64 {
        self.steps_per_epoch() * self.accumulation
    }

    /// Where micro-batch `batch` (0-based over the run; optimizer step s
    /// reads s*A .. (s+1)*A) reads from: (epoch, micro-batch within epoch).
    pub fn position(&self, batch: i64) -> (i64, i64) {
        let per_epoch = self.batches_per_epoch();
        (batch / per_epoch, batch % per_epoch)
    }

    /// This rank's positions of the epoch's order within `range` (padding
    /// positions past the data set are not included).
    pub fn positions_in(&self, range: std::ops::Range<u64>) -> Vec<u64> {
        let global = (self.batch_size * self.world_size) as u64;
        let last = self.batches_per_epoch() as u64 - 1;
        let first_batch = range.start / global;
        let last_batch = ((range.end.max(1) - 1) / global).min(last);
        let mut out = Vec::new();
        for b in first_batch..=last_batch {
            let span = self.batch_span(b as i64);
            let lo = span.start.max(range.start);
            let hi = span.end.min(range.end).min(self.num_samples as u64);
            out.extend(lo..hi.max(lo));
        }
        out
    }

    /// This rank's positions of micro-batch `batch` of an epoch, before
    /// wrapping: those past the data set are the padding.
    pub fn batch_span(&self, batch: i64) -> std::ops::Range<u64> {
        let start = (batch * self.world_size + self.rank) * self.batch_size;
        start as u64..(start + self.batch_size) as u64
    }

    /// This rank's positions of micro-batch `batch` in the epoch's order;
    /// positions past the data set wrap around (the padding).
    pub fn batch_positions(&self, batch: i64) -> impl Iterator<Item = u64> {
        let n = self.num_samples as u64;
        self.batch_span(batch).map(move |p| p % n)
    }
}

#[cfg(test)]
mod tests;
