//! One optimizer step: its micro-batches forward and backward (gradients
//! accumulated, one all-reduce per step), the check every rank decides the
//! same on (the averaged loss and gradient norm must be finite; f16
//! overflows back the loss scale off), then clipping and the update.

use super::metrics::{Metrics, Sums};
use super::reduce::Reduced;
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

/// What a step weighs and how it reduces, fixed before its micro-batches.
struct StepPlan {
    /// Each micro-batch's rows (the last batch of an epoch may be short;
    /// every rank's is as long).
    lens: Vec<i64>,
    rows_local: i64,
    /// The dead-latent mask and its count, for the top-k aux loss.
    dead: Option<(Tensor, i64)>,
    /// One micro-batch whose all-reduce overlaps its backward pass.
    overlap: bool,
    l1c: f64,
    auxc: f64,
    /// The f16 loss scale (1 otherwise).
    scale: f64,
}

/// The step's reduced losses, gradient norm and notices, read at its one
/// device sync.
struct Checked {
    mse: f64,
    l1: f64,
    aux: f64,
    grad_norm: f64,
    preempted: bool,
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
        let plan = self.plan_step(step);
        let learning_rate = self.schedule.lr(step);
        let d_sae = self.cfg.d_sae();
        let mut sums = logged.then(|| Sums::new(self.cfg.model.d_in, d_sae, self.device, false));
        let (reduced, wait) = self.accumulate(step, batches, &plan, sums.as_mut())?;
        let mut comm = reduced.comm;
        let (mut grads, fired, checked) = self.unscale(reduced, plan.scale)?;
        let Checked {
            mse,
            l1,
            aux,
            grad_norm,
            preempted,
        } = checked;
        let loss = mse + plan.l1c * l1 + plan.auxc * aux;
        self.apply(step, &mut grads, loss, grad_norm, learning_rate)?;
        let rows = plan.rows_local * self.launch.world_size;
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

    fn plan_step(&self, step: i64) -> StepPlan {
        let cfg = self.cfg;
        let acc = self.accumulation;
        let auxc = cfg.model.aux_coefficient;
        // Every micro-batch is whole (the sampler wraps the epoch's end).
        let lens: Vec<i64> = vec![self.sampler.batch_size; acc as usize];
        let dead = (cfg.topk().is_some() && auxc > 0.0).then(|| {
            let mask = self.state.dead.mask();
            let count = mask.sum(Kind::Int64).int64_value(&[]);
            (mask, count)
        });
        let overlap = self.group.is_some()
            && cfg.runtime.allreduce == AllreduceMode::Overlap
            && acc == 1
            && dead.is_none();
        StepPlan {
            rows_local: lens.iter().sum(),
            lens,
            dead,
            overlap,
            l1c: self.schedule.l1(step),
            auxc,
            scale: self.state.numerics.loss_scale,
        }
    }

    /// The micro-batches forward and backward, their gradients summed and
    /// all-reduced once with the step's extras (losses, fired latents, this
    /// rank's notice flag); returns them and the time spent waiting for data.
    fn accumulate(
        &mut self,
        step: i64,
        batches: &mut BatchQueue,
        plan: &StepPlan,
        mut sums: Option<&mut Sums>,
    ) -> Result<(Reduced, Duration), RankError> {
        let acc = self.accumulation;
        let d_sae = self.cfg.d_sae();
        let mut wait = Duration::ZERO;
        let mut grads: Option<Vec<Tensor>> = None;
        let mut stats = Tensor::zeros([3], (Kind::Float, self.device));
        let mut fired = Tensor::zeros([d_sae], (Kind::Float, self.device));
        // This rank's notice flag, read once: summed with the others' below.
        let heard = if crate::preempt::noticed() { 1.0 } else { 0.0 };
        let notice = Tensor::full([1], heard, (Kind::Float, self.device));
        for (j, len) in plan.lens.iter().enumerate() {
            let (host, waited, ids) = self.next_batch(step * acc + j as i64, batches)?;
            if let Some(sums) = sums.as_deref_mut() {
                sums.add_ids(ids);
            }
            wait += waited;
            let x = self.to_device(&host);
            let dead_mask = plan.dead.as_ref().map(|(mask, count)| DeadMask {
                mask,
                count: *count,
            });
            let f = self.state.sae.forward(&x, self.kind, dead_mask);
            let weight = *len as f64 / plan.rows_local as f64;
            let loss = (&f.mse + &f.l1 * plan.l1c + &f.aux * plan.auxc) * (weight * plan.scale);
            stats += Tensor::stack(&[f.mse.detach(), f.l1.detach(), f.aux.detach()], 0) * weight;
            if plan.overlap {
                observe(&x, &f, &mut fired, sums.as_deref_mut());
                let extras = Tensor::cat(&[&stats, &fired, &notice], 0);
                return Ok((self.backward_overlapped(&loss, &f, extras)?, wait));
            }
            let g = Tensor::run_backward(&[&loss], &self.state.sae.params, false, false);
            // After the backward pass freed the graph's buffers.
            observe(&x, &f, &mut fired, sums.as_deref_mut());
            grads = Some(match grads {
                None => g,
                Some(sum) => sum.into_iter().zip(g).map(|(a, b)| a + b).collect(),
            });
        }
        let grads = grads.expect("at least one micro-batch");
        let reduced = self.reduce(grads, Tensor::cat(&[&stats, &fired, &notice], 0))?;
        Ok((reduced, wait))
    }

    /// The reduced gradients divided by the world size and loss scale (in
    /// place: they are views of the reduce buffer, which no second copy
    /// joins), the fired latents, and what every rank checks the same.
    fn unscale(
        &self,
        reduced: Reduced,
        scale: f64,
    ) -> Result<(Vec<Tensor>, Tensor, Checked), RankError> {
        let d_sae = self.cfg.d_sae();
        let world = self.world();
        let mut grads = reduced.grads;
        if world * scale != 1.0 {
            tch::no_grad(|| {
                for g in &mut grads {
                    let _ = g.g_div_scalar_(world * scale);
                }
            });
        }
        // The extras are copied out so the reduce buffer can go.
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
        let checked = Checked {
            mse: check[0],
            l1: check[1],
            aux: check[2],
            grad_norm: check[3].sqrt(),
            preempted: check[4] > 0.5,
        };
        Ok((grads, fired, checked))
    }

    /// The update, when the step's loss and gradient norm allow it: clipped,
    /// then Adam (and the decoder's unit norm). Too many non-finite steps
    /// in a row is divergence.
    fn apply(
        &mut self,
        step: i64,
        grads: &mut [Tensor],
        loss: f64,
        grad_norm: f64,
        learning_rate: f64,
    ) -> Result<(), RankError> {
        match self.state.numerics.judge(self.f16, loss, grad_norm) {
            Verdict::Apply => {
                let max = self.cfg.optim.max_grad_norm;
                if max > 0.0 && grad_norm > max {
                    let coefficient = max / (grad_norm + 1e-6);
                    tch::no_grad(|| {
                        for g in grads.iter_mut() {
                            let _ = g.g_mul_scalar_(coefficient);
                        }
                    });
                }
                let state = &mut self.state;
                state
                    .adam
                    .step(&mut state.sae.params, grads, learning_rate)?;
                if state.sae.shape.unit_decoder {
                    state.sae.normalise_decoder();
                }
            }
            Verdict::Overflow => {}
            Verdict::NonFinite => {
                if self.state.numerics.nonfinite_run > self.cfg.optim.max_nonfinite_steps {
                    self.state.step = step + 1;
                    return Err(self.diverged(step + 1, loss, grad_norm));
                }
            }
        }
        Ok(())
    }
}
