//! Training data, streamed: activation shards (`.npy`, `.safetensors`,
//! `.parquet`; files, directories, globs) or the synthetic source, read a
//! batch at a time by a background reader. Nothing holds the data set:
//! a rank keeps one header record per shard, the current shuffle window's
//! order and `data.prefetch_batches` batches (docs/data.md).

pub mod catalog;
pub mod elem;
pub mod error;
pub mod prefetch;
pub mod preload;
pub mod reader;
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
