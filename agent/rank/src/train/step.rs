//! One optimizer step: its micro-batches forward and backward (gradients
//! accumulated, one all-reduce per step), the check every rank decides the
//! same on (the averaged loss and gradient norm must be finite; f16
//! overflows back the loss scale off), then clipping and the update.

use super::metrics::{Metrics, Sums};
use super::Trainer;
use crate::data::batch_queue::BatchQueue;
use crate::error::RankError;
use crate::model::{DeadMask, Forward, W_DEC};
use crate::state::Verdict;
use cohort_spec::config::AllreduceMode;
use std::time::{Duration, Instant};
use tch::{Device, Kind, Tensor};

/// What one step did, for the progress lines.
pub struct StepReport {
    /// Samples of all ranks.
    pub rows: i64,
    pub wait: Duration,
    pub comm: Duration,
    pub elapsed: Duration,
    pub loss: f64,
    pub mse: f64,
    pub l1: f64,
    pub aux: f64,
    pub learning_rate: f64,
    /// After the all-reduce, before clipping.
    pub grad_norm: f64,
    /// L0 and explained variance over the global batch (logged steps only).
    pub metrics: Option<Metrics>,
    /// Some rank heard a preemption notice by this step (the flags of all
    /// ranks summed in the step's all-reduce: every rank agrees).
    pub preempted: bool,
}

/// Which latents fired in a micro-batch (counted into `fired`), and its
/// metrics on logged steps.
fn observe(x: &Tensor, f: &Forward, fired: &mut Tensor, sums: Option<&mut Sums>) {
    // Per latent, how many samples it fired on: one reduction, no mask.
    let counts = f.z.detach().count_nonzero(0);
    *fired += &counts;
    if let Some(sums) = sums {
        sums.add(x, f, &counts);
    }
}

impl Trainer<'_> {
    /// Optimizer step `step` (0-based); `logged` steps also measure the
    /// batch's metrics (one more small all-reduce).
    pub(super) fn step(
        &mut self,
        step: i64,
        batches: &mut BatchQueue,
        logged: bool,
    ) -> Result<StepReport, RankError> {
        let started = Instant::now();
        let cfg = self.cfg;
        let acc = self.accumulation;
        let (l1c, auxc) = (self.schedule.l1(step), cfg.model.aux_coefficient);
        let learning_rate = self.schedule.lr(step);
        let d_sae = self.cfg.d_sae();
        let scale = self.state.numerics.loss_scale;
        // Each micro-batch's loss weighs by its rows (the last batch of an
        // epoch may be short; every rank's is as long).
        let lens: Vec<i64> = (0..acc)
            .map(|j| {
                self.sampler
                    .batch_len(self.sampler.position(step * acc + j).1)
            })
            .collect();
        let rows_local: i64 = lens.iter().sum();
        let dead = (cfg.topk().is_some() && auxc > 0.0).then(|| {
            let mask = self.state.dead.mask();
            let count = mask.sum(Kind::Int64).int64_value(&[]);
            (mask, count)
        });
        let overlap = self.group.is_some()
            && cfg.runtime.allreduce == AllreduceMode::Overlap
            && acc == 1
            && dead.is_none();

        let mut wait = Duration::ZERO;
        let mut grads: Option<Vec<Tensor>> = None;
        let mut stats = Tensor::zeros([3], (Kind::Float, self.device));
        let mut fired = Tensor::zeros([d_sae], (Kind::Float, self.device));
        // This rank's notice flag, read once: summed with the others' below.
        let heard = if crate::preempt::noticed() { 1.0 } else { 0.0 };
        let notice = Tensor::full([1], heard, (Kind::Float, self.device));
        let mut sums = logged.then(|| Sums::new(cfg.model.d_in, d_sae, self.device, false));
        let mut reduced = None;
        for (j, len) in lens.iter().enumerate() {
            let (host, waited) = self.next_batch(step * acc + j as i64, batches)?;
            wait += waited;
            let x = self.to_device(&host);
            let dead_mask = dead.as_ref().map(|(mask, count)| DeadMask {
                mask,
                count: *count,
            });
            let f = self.state.sae.forward(&x, self.kind, dead_mask);
            let weight = *len as f64 / rows_local as f64;
            let loss = (&f.mse + &f.l1 * l1c + &f.aux * auxc) * (weight * scale);
            stats += Tensor::stack(&[f.mse.detach(), f.l1.detach(), f.aux.detach()], 0) * weight;
            if overlap {
                observe(&x, &f, &mut fired, sums.as_mut());
                let extras = Tensor::cat(&[&stats, &fired, &notice], 0);
                reduced = Some(self.backward_overlapped(&loss, &f, extras)?);
                continue;
            }
            let g = Tensor::run_backward(&[&loss], &self.state.sae.params, false, false);
            // After the backward pass freed the graph's buffers.
            observe(&x, &f, &mut fired, sums.as_mut());
            grads = Some(match grads {
                None => g,
                Some(sum) => sum.into_iter().zip(g).map(|(a, b)| a + b).collect(),
            });
        }
        let reduced = match reduced {
            Some(r) => r,
            None => {
                let grads = grads.expect("at least one micro-batch");
                self.reduce(grads, Tensor::cat(&[&stats, &fired, &notice], 0))?
            }
        };
        let mut comm = reduced.comm;
        let world = self.world();
        // In place: the gradients are views of the reduce buffer, which no
        // second copy joins; the extras are copied out so it can go.
        let mut grads = reduced.grads;
        if world * scale != 1.0 {
            tch::no_grad(|| {
                for g in &mut grads {
                    let _ = g.g_div_scalar_(world * scale);
                }
            });
        }
        let stats = reduced.extras.narrow(0, 0, 3) / world;
        let fired = reduced.extras.narrow(0, 3, d_sae).copy();
        let notices = reduced.extras.narrow(0, 3 + d_sae, 1).copy();
        drop(reduced.extras);
        if self.state.sae.shape.unit_decoder {
            tch::no_grad(|| self.state.sae.project_decoder_grad(&mut grads[W_DEC]));
        }
        // Each gradient's norm without a squared copy of it.
        let norm_sq = Tensor::stack(&grads.iter().map(Tensor::norm).collect::<Vec<_>>(), 0)
            .square()
            .sum(Kind::Float);
        // One device sync a step: the losses, the gradient norm, the notices.
        let check = Vec::<f64>::try_from(
            Tensor::cat(&[stats, norm_sq.view([1]), notices], 0)
                .to_kind(Kind::Double)
                .to_device(Device::Cpu),
        )?;
        let (mse, l1, aux) = (check[0], check[1], check[2]);
        let loss = mse + l1c * l1 + auxc * aux;
        let grad_norm = check[3].sqrt();
        let preempted = check[4] > 0.5;

        match self.state.numerics.judge(self.f16, loss, grad_norm) {
            Verdict::Apply => {
                let max = cfg.optim.max_grad_norm;
                if max > 0.0 && grad_norm > max {
                    let coefficient = max / (grad_norm + 1e-6);
                    tch::no_grad(|| {
                        for g in &mut grads {
                            let _ = g.g_mul_scalar_(coefficient);
                        }
                    });
                }
                let state = &mut self.state;
                state
                    .adam
                    .step(&mut state.sae.params, &mut grads, learning_rate)?;
                if state.sae.shape.unit_decoder {
                    state.sae.normalise_decoder();
                }
            }
            Verdict::Overflow => {}
            Verdict::NonFinite => {
                if self.state.numerics.nonfinite_run > cfg.optim.max_nonfinite_steps {
                    self.state.step = step + 1;
                    return Err(self.diverged(step + 1, loss, grad_norm));
                }
            }
        }
        let rows = rows_local * self.launch.world_size;
        self.state.dead.observe(&fired, rows);
        self.state.step = step + 1;

        let metrics = match sums {
            Some(sums) => {
                let mut flat = sums.flat();
                let span = crate::timing::Span::begin(self.device);
                self.allreduce(&mut [&mut flat])?;
                comm += span.end();
                Some(sums.metrics(&flat))
            }
            None => None,
        };
        Ok(StepReport {
            rows,
            wait,
            comm,
            elapsed: started.elapsed(),
            loss,
            mse,
            l1,
            aux,
            learning_rate,
            grad_norm,
            metrics,
            preempted,
        })
    }
}
