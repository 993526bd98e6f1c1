//! Training data, streamed: activation shards (`.npy`, `.safetensors`,
//! `.parquet`; files, directories, globs) or the synthetic source, read a
//! batch at a time by a background reader. Nothing holds the data set:
//! a rank keeps one header record per shard, the current shuffle window's
//! order and `data.prefetch_batches` batches (docs/data.md).
//!
//! The stages, from the bytes up:
//! - [`catalog`]: every shard found and its header read once (the bytes
//!   come from the storage crate: local files or S3 objects);
//! - [`rows`]: rows of the catalog read straight from the shards;
//! - [`read_ahead`]: a shuffle window's rows read on a thread of their own
//!   while the previous window trains (where the storage is remote or the
//!   format costs a decode);
//! - [`source`]: a batch's rows by sample id, from the windows read ahead,
//!   the shards, or the synthetic generator;
//! - [`sampler`]: which sample ids each rank reads, step by step;
//! - [`batch_queue`]: the batches of the coming steps, formed on a thread
//!   into a bounded queue the training loop takes from.

pub mod batch_queue;
pub mod catalog;
pub mod digest;
pub mod elem;
pub mod error;
pub mod read_ahead;
pub mod rows;
pub mod sampler;
pub mod shard;
pub mod source;
pub mod synthetic;

use crate::error::RankError;
use cohort_spec::TrainingConfig;
use source::Source;

/// Open the configured source: every shard's header is read and checked here,
/// before the rank waits for its peers, so bad data fails fast.
pub fn open(cfg: &TrainingConfig) -> Result<Source, RankError> {
    let d = &cfg.data;
    let chunk = d.shuffle_chunk as u64;
    match (&d.synthetic, &d.files) {
        (Some(s), _) => Ok(Source::Synthetic(
            synthetic::Synthetic::new(s, cfg.model.d_in, cfg.optim.seed),
            s.num_samples as u64,
        )),
        (None, Some(f)) => {
            let catalog = catalog::Catalog::open(f, cfg.model.d_in).map_err(RankError::Data)?;
            Ok(Source::files(catalog, chunk))
        }
        (None, None) => unreachable!("validated config has a data source"),
    }
}

/// Chunks per shuffle window: `shuffle_buffer` rounded up to whole chunks.
pub fn window_chunks(cfg: &TrainingConfig) -> u64 {
    (cfg.data.shuffle_buffer as u64).div_ceil(cfg.data.shuffle_chunk as u64)
}
