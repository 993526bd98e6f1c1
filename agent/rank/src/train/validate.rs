//! Validation: the whole held-out set (`[validation]`) evaluated with the
//! model unchanged, sharded across ranks (rank r reads the r-th contiguous
//! part), its sums all-reduced once, so the metrics are exactly those of
//! the whole set; rank 0 reports them and keeps the state with the lowest
//! loss as the best checkpoint.

use super::metrics::Sums;
use super::Trainer;
use crate::data::catalog::Catalog;
use crate::data::rows::RowReader;
use crate::error::RankError;
use crate::launch::Launch;
use cohort_spec::progress::ProgressLine;
use cohort_spec::TrainingConfig;
use std::sync::Arc;
use tch::Tensor;

/// How often a rank still validating says so.
const VALIDATING_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// The validation shards, opened (headers read and checked) at start.
pub struct ValidationSet {
    reader: RowReader,
    catalog: Arc<Catalog>,
    /// This rank's rows.
    rows: std::ops::Range<u64>,
}

impl ValidationSet {
    /// Open `[validation]` when the config has one; errors name the shard.
    pub fn open(cfg: &TrainingConfig, launch: &Launch) -> Result<Option<Self>, RankError> {
        let Some(v) = &cfg.validation else {
            return Ok(None);
        };
        let catalog = Catalog::open(&v.files(), cfg.model.d_in)
            .map_err(|e| RankError::Data(format!("validation: {e}")))?;
        let catalog = Arc::new(catalog);
        let (n, r, w) = (catalog.rows, launch.rank as u64, launch.world_size as u64);
        Ok(Some(Self {
            reader: RowReader::new(catalog.clone(), cfg.data.shuffle_chunk as u64),
            rows: n * r / w..n * (r + 1) / w,
            catalog,
        }))
    }
}

impl Trainer<'_> {
    /// Evaluate the validation set after step `step`; rank 0 reports it and
    /// saves the state as `best/` when its loss is the lowest so far.
    pub(super) fn validate(&mut self, step: i64) -> Result<(), RankError> {
        let Some(set) = self.validation.as_mut() else {
            return Ok(());
        };
        let cfg = self.cfg;
        let (d_in, d_sae) = (cfg.model.d_in, cfg.d_sae());
        let mut sums = Sums::new(d_in, d_sae, self.device, true);
        let batch = cfg.optim.batch_size as u64;
        let elem = set.catalog.elem;
        let row_bytes = d_in as usize * elem.size();
        let mut at = set.rows.start;
        let mut said = std::time::Instant::now();
        while at < set.rows.end {
            if said.elapsed() >= VALIDATING_EVERY {
                said = std::time::Instant::now();
                self.out.emit(&ProgressLine::Validating {
                    rank: self.launch.rank,
                    step,
                    samples: (at - set.rows.start) as i64,
                    of: (set.rows.end - set.rows.start) as i64,
                });
            }
            let end = (at + batch).min(set.rows.end);
            let ids: Vec<u64> = (at..end).collect();
            let mut bytes = vec![0u8; ids.len() * row_bytes];
            set.reader.fill(&ids, &mut bytes)?;
            let host = Tensor::from_data_size(&bytes, &[ids.len() as i64, d_in], elem.kind());
            let x = host.to_device(self.device).to_kind(self.kind);
            tch::no_grad(|| {
                let f = self.state.sae.forward(&x, self.kind, None);
                sums.add(&x, &f, &f.z.count_nonzero(0));
            });
            at = end;
        }
        let mut flat = sums.flat();
        self.allreduce(&mut [&mut flat])?;
        let m = sums.metrics(&flat);
        let loss = m.mse + self.schedule.l1(step - 1) * m.l1;
        let best = loss.is_finite() && self.best_loss.is_none_or(|b| loss < b);
        let line = ProgressLine::Validation {
            step,
            loss,
            mse: m.mse,
            l0: m.l0,
            explained_variance: m.explained_variance,
            dead_fraction: m.dead_fraction,
            samples: m.samples,
            best,
        };
        self.out.leader(&line);
        self.last_validation = Some(line);
        if best {
            self.best_loss = Some(loss);
            if self.launch.is_leader() {
                let manifest = self.manifest(step, self.last_validation.as_ref());
                let path = self
                    .checkpoints
                    .save_best(self.run_dir, &self.state, &manifest)?;
                self.out.emit(&ProgressLine::Checkpoint {
                    step,
                    path,
                    best: true,
                });
            }
        }
        Ok(())
    }
}
