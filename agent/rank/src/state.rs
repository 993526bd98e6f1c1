//! Everything a checkpoint holds and a resume restores, so a resumed run
//! continues bit for bit: the f32 parameters, Adam's state, the schedule's
//! position, the loss scale and step counters, and when each latent last
//! fired.

use crate::model::{Adam, Sae};
use tch::{Device, Kind, Tensor};

/// Dynamic loss scaling for f16 (the data contract's constants): start at
/// 2^16, double after [`GROWTH_INTERVAL`] good steps in a row, halve on an
/// overflow (that step is skipped). Below [`MIN_LOSS_SCALE`] it no longer
/// backs off: an overflow there is a non-finite step like any other.
pub const INITIAL_LOSS_SCALE: f64 = 65536.0;
pub const GROWTH_INTERVAL: i64 = 2000;
pub const MIN_LOSS_SCALE: f64 = 1.0;

/// The step's numerics: loss scale and counters.
#[derive(Debug, Clone, PartialEq)]
pub struct Numerics {
    /// 1 unless the compute dtype is f16.
    pub loss_scale: f64,
    /// Good steps since the scale last changed.
    pub good_steps: i64,
    /// Non-finite steps in a row (reset by a good one).
    pub nonfinite_run: i64,
    /// Non-finite steps skipped in all.
    pub nonfinite_total: i64,
    /// f16 overflow steps skipped in all.
    pub overflow_total: i64,
}

/// What a step's check decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Apply the update.
    Apply,
    /// f16 gradients overflowed: skip, the scale backed off.
    Overflow,
    /// Loss or gradient norm not finite: skip and count.
    NonFinite,
}

impl Numerics {
    pub fn new(f16: bool) -> Self {
        Self {
            loss_scale: if f16 { INITIAL_LOSS_SCALE } else { 1.0 },
            good_steps: 0,
            nonfinite_run: 0,
            nonfinite_total: 0,
            overflow_total: 0,
        }
    }

    /// Judge a step by its (averaged, unscaled) loss and gradient norm; the
    /// same numbers on every rank, so every rank decides the same.
    pub fn judge(&mut self, f16: bool, loss: f64, grad_norm: f64) -> Verdict {
        if loss.is_finite() && grad_norm.is_finite() {
            self.nonfinite_run = 0;
            if f16 {
                self.good_steps += 1;
                if self.good_steps >= GROWTH_INTERVAL {
                    self.loss_scale *= 2.0;
                    self.good_steps = 0;
                }
            }
            return Verdict::Apply;
        }
        if f16 && loss.is_finite() && self.loss_scale * 0.5 >= MIN_LOSS_SCALE {
            self.loss_scale *= 0.5;
            self.good_steps = 0;
            self.overflow_total += 1;
            return Verdict::Overflow;
        }
        self.good_steps = 0;
        self.nonfinite_run += 1;
        self.nonfinite_total += 1;
        Verdict::NonFinite
    }
}

/// When each latent last fired, in training samples seen: a latent is dead
/// when it fired on none of the last `window` samples (or never, in a run
/// shorter than that).
pub struct DeadLatents {
    /// [d_sae] i64: samples seen at the end of the step it last fired in; -1: never.
    pub last_fired: Tensor,
    /// Training samples seen by all ranks together.
    pub samples_seen: i64,
    pub window: i64,
}

impl DeadLatents {
    pub fn new(d_sae: i64, window: i64, device: Device) -> Self {
        Self {
            last_fired: Tensor::full([d_sae], -1, (Kind::Int64, device)),
            samples_seen: 0,
            window,
        }
    }

    /// A step of `rows` samples (all ranks) ended; `fired` [d_sae] counts
    /// the samples each latent fired on (any number > 0 is a firing).
    pub fn observe(&mut self, fired: &Tensor, rows: i64) {
        self.samples_seen += rows;
        let now = self.last_fired.full_like(self.samples_seen);
        self.last_fired = now.where_self(&fired.gt(0.0), &self.last_fired);
    }

    /// [d_sae] bool: the dead latents.
    pub fn mask(&self) -> Tensor {
        self.last_fired
            .lt(0)
            .logical_or(&self.last_fired.le(self.samples_seen - self.window))
    }

    /// How many latents are dead (a device sync).
    pub fn count(&self) -> i64 {
        self.mask().sum(Kind::Int64).int64_value(&[])
    }
}

/// The whole training state of one rank.
pub struct TrainState {
    pub sae: Sae,
    pub adam: Adam,
    /// Optimizer steps done: the schedule's and the data's position
    /// (skipped steps count).
    pub step: i64,
    pub numerics: Numerics,
    pub dead: DeadLatents,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_scale_backs_off_on_overflow_and_grows_after_good_steps() {
        let mut n = Numerics::new(true);
        assert_eq!(n.judge(true, 1.0, f64::INFINITY), Verdict::Overflow);
        assert_eq!(n.loss_scale, INITIAL_LOSS_SCALE / 2.0);
        assert_eq!((n.overflow_total, n.nonfinite_run), (1, 0));
        for _ in 0..GROWTH_INTERVAL {
            assert_eq!(n.judge(true, 1.0, 1.0), Verdict::Apply);
        }
        assert_eq!(n.loss_scale, INITIAL_LOSS_SCALE);
        assert_eq!(
            n.judge(true, f64::NAN, 1.0),
            Verdict::NonFinite,
            "a NaN loss is not an overflow"
        );
        assert_eq!(n.nonfinite_run, 1);
        n.loss_scale = MIN_LOSS_SCALE;
        assert_eq!(
            n.judge(true, 1.0, f64::NAN),
            Verdict::NonFinite,
            "no scale left to shed"
        );
        assert_eq!((n.nonfinite_run, n.nonfinite_total), (2, 2));
        assert_eq!(n.judge(true, 1.0, 1.0), Verdict::Apply);
        assert_eq!(n.nonfinite_run, 0);
    }

    #[test]
    fn f32_never_scales() {
        let mut n = Numerics::new(false);
        assert_eq!(n.judge(false, 1.0, f64::INFINITY), Verdict::NonFinite);
        assert_eq!(n.loss_scale, 1.0);
    }

    #[test]
    fn a_latent_is_dead_after_a_window_without_firing() {
        let mut d = DeadLatents::new(3, 100, Device::Cpu);
        assert_eq!(d.count(), 3, "never fired: dead");
        d.observe(&Tensor::from_slice(&[1f32, 0.0, 2.0]), 60);
        assert_eq!(
            Vec::<bool>::try_from(d.mask()).unwrap(),
            vec![false, true, false]
        );
        d.observe(&Tensor::from_slice(&[0f32, 0.0, 1.0]), 60);
        assert_eq!(d.count(), 1, "latent 0 fired 60 samples ago, within 100");
        d.observe(&Tensor::from_slice(&[0f32, 0.0, 0.0]), 60);
        assert_eq!(
            Vec::<bool>::try_from(d.mask()).unwrap(),
            vec![true, true, false]
        );
    }
}
