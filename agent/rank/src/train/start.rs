//! Where training starts: rank 0 restores its newest usable checkpoint (a
//! corrupt one is reported and skipped for the next older) and broadcasts
//! the whole state; a fresh run may start the decoder bias at the data's mean.

use super::Trainer;
use crate::checkpoint::{Corrupt, Manifest};
use crate::error::RankError;
use crate::model::B_DEC;
use cohort_spec::config::BDecInit;
use cohort_spec::progress::ProgressLine;
use tch::{Device, Kind, Tensor};

impl Trainer<'_> {
    /// Agree on where to start; returns the step and whether it resumed.
    pub(super) fn synchronise_start(&mut self) -> Result<(i64, bool), RankError> {
        let mut resumed = false;
        if self.launch.is_leader() {
            resumed = self.restore_newest_usable()?;
            self.best_loss = self
                .checkpoints
                .best()?
                .as_ref()
                .and_then(Manifest::validation_loss);
        }
        let Some(group) = &self.group else {
            return Ok((self.state.step, resumed));
        };
        let n = &self.state.numerics;
        let mut header = Tensor::from_slice(&[
            i64::from(resumed),
            self.state.step,
            self.state.adam.t,
            self.state.dead.samples_seen,
            n.good_steps,
            n.nonfinite_run,
            n.nonfinite_total,
            n.overflow_total,
        ])
        .to_device(self.device);
        let mut scale = Tensor::from_slice(&[n.loss_scale]).to_device(self.device);
        group.broadcast(&mut [&mut header, &mut scale], 0)?;
        let h = Vec::<i64>::try_from(header.to_device(Device::Cpu))?;
        let state = &mut self.state;
        let mut tensors: Vec<&mut Tensor> = state.sae.params.iter_mut().collect();
        if h[0] == 1 {
            tensors.extend(state.adam.m.iter_mut());
            tensors.extend(state.adam.v.iter_mut());
            tensors.push(&mut state.dead.last_fired);
        }
        tch::no_grad(|| group.broadcast(&mut tensors, 0))?;
        state.step = h[1];
        state.adam.t = h[2];
        state.dead.samples_seen = h[3];
        let n = &mut state.numerics;
        (
            n.good_steps,
            n.nonfinite_run,
            n.nonfinite_total,
            n.overflow_total,
        ) = (h[4], h[5], h[6], h[7]);
        n.loss_scale = scale.double_value(&[0]);
        Ok((h[1], h[0] == 1))
    }

    /// Rank 0: the newest checkpoint that passes its verification, if any
    /// exists; an error when some exist and none is usable.
    fn restore_newest_usable(&mut self) -> Result<bool, RankError> {
        let candidates = self.checkpoints.candidates()?;
        let mut rejected = Vec::new();
        for found in &candidates {
            if let Some(published) = &self.launch.published {
                if !published.allows(found.manifest.attempt, found.manifest.step) {
                    // Written by a superseded attempt after it was superseded,
                    // or never recorded by the coordinator: not resumed from.
                    eprintln!(
                        "cohort-rank: skipping checkpoint {} (attempt {:?}, step {}): the coordinator did not publish it",
                        found.location, found.manifest.attempt, found.manifest.step
                    );
                    continue;
                }
            }
            self.check_sampler(&found.manifest)?;
            match self
                .checkpoints
                .restore(found, self.run_dir, &mut self.state)?
            {
                Ok(()) => {
                    eprintln!(
                        "cohort-rank: resuming from {} (step {})",
                        found.location, found.manifest.step
                    );
                    return Ok(true);
                }
                Err(Corrupt(reason)) => {
                    eprintln!(
                        "cohort-rank: warning: skipping checkpoint {}: {reason}",
                        found.location
                    );
                    self.out.emit(&ProgressLine::CheckpointRejected {
                        step: found.manifest.step,
                        path: found.location.clone(),
                        reason: reason.clone(),
                    });
                    rejected.push(reason);
                }
            }
        }
        if rejected.is_empty() {
            return Ok(false);
        }
        Err(RankError::Checkpoint(format!(
            "no usable checkpoint: {}",
            rejected.join("; ")
        )))
    }

    /// A checkpoint resumes exactly only over the data set it was written
    /// over, read in the same order.
    fn check_sampler(&self, manifest: &Manifest) -> Result<(), RankError> {
        let Some(saved) = &manifest.sampler else {
            return Ok(());
        };
        if saved.num_samples != self.sampler.num_samples {
            return Err(RankError::Data(format!(
                "the data set now has {} samples, but checkpoint step {} was written over {}: resuming would not read the same samples",
                self.sampler.num_samples, manifest.step, saved.num_samples
            )));
        }
        Ok(())
    }

    /// `model.b_dec_init = "mean"` on a fresh start: the decoder bias starts
    /// at the mean of step 1's micro-batches over all ranks. The batches are
    /// kept for the step.
    pub(super) fn init_b_dec(
        &mut self,
        batches: &mut crate::data::batch_queue::BatchQueue,
    ) -> Result<(), RankError> {
        if self.cfg.model.b_dec_init != BDecInit::Mean || self.state.step != 0 {
            return Ok(());
        }
        let d_in = self.cfg.model.d_in;
        let mut sum = Tensor::zeros([d_in + 1], (Kind::Double, self.device));
        for micro in 0..self.accumulation {
            let (host, wait, ids) = batches.next(micro)?;
            let x = host.to_device(self.device).to_kind(Kind::Double);
            let rows = Tensor::full([1], x.size()[0] as f64, (Kind::Double, self.device));
            sum += Tensor::cat(
                &[
                    x.sum_dim_intlist([0i64].as_slice(), false, Kind::Double),
                    rows,
                ],
                0,
            );
            self.held.push_back((host, wait, ids));
        }
        self.allreduce(&mut [&mut sum])?;
        let mean = sum.narrow(0, 0, d_in) / sum.narrow(0, d_in, 1);
        tch::no_grad(|| {
            self.state.sae.params[B_DEC].copy_(&mean.to_kind(Kind::Float));
        });
        Ok(())
    }
}
