//! The learning-rate schedule (linear warmup from 0, then constant, cosine
//! or linear decay to `lr_min_ratio` at the last step) and the L1
//! coefficient's warmup. Pure functions of the optimizer step, so a resumed
//! run continues exactly where it stood.

use cohort_spec::config::LrSchedule;
use cohort_spec::TrainingConfig;

#[derive(Debug, Clone)]
pub struct Schedule {
    base_lr: f64,
    kind: LrSchedule,
    warmup: i64,
    min_ratio: f64,
    total: i64,
    l1: f64,
    l1_warmup: i64,
}

impl Schedule {
    pub fn new(cfg: &TrainingConfig, total_steps: i64) -> Self {
        let o = &cfg.optim;
        Self {
            base_lr: o.learning_rate,
            kind: o.lr_schedule,
            warmup: o.lr_warmup_steps,
            min_ratio: o.lr_min_ratio,
            total: total_steps,
            l1: cfg.model.l1_coefficient,
            l1_warmup: o.l1_warmup_steps,
        }
    }

    /// The learning rate of optimizer step `step` (0-based).
    pub fn lr(&self, step: i64) -> f64 {
        let factor = if step < self.warmup {
            (step + 1) as f64 / self.warmup as f64
        } else {
            let span = (self.total - 1 - self.warmup).max(1) as f64;
            let p = ((step - self.warmup) as f64 / span).clamp(0.0, 1.0);
            let floor = self.min_ratio;
            match self.kind {
                LrSchedule::Constant => 1.0,
                LrSchedule::Linear => 1.0 - (1.0 - floor) * p,
                LrSchedule::Cosine => {
                    floor + (1.0 - floor) * 0.5 * (1.0 + (std::f64::consts::PI * p).cos())
                }
            }
        };
        self.base_lr * factor
    }

    /// The L1 coefficient of optimizer step `step`.
    pub fn l1(&self, step: i64) -> f64 {
        if step < self.l1_warmup {
            self.l1 * (step + 1) as f64 / self.l1_warmup as f64
        } else {
            self.l1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> TrainingConfig {
        TrainingConfig::from_toml(&format!(
            "[model]\nd_in = 4\nl1_coefficient = 0.5\n[optim]\nlearning_rate = 1.0\nbatch_size = 1\nsteps = 11\n{extra}\n[data.synthetic]\nnum_samples = 4\n"
        ))
        .unwrap()
    }

    #[test]
    fn warmup_then_decay_to_the_floor_at_the_last_step() {
        let s = Schedule::new(
            &config("lr_schedule = \"linear\"\nlr_warmup_steps = 1\nlr_min_ratio = 0.1"),
            11,
        );
        assert_eq!(s.lr(0), 1.0, "one warmup step ends at the full rate");
        assert!((s.lr(10) - 0.1).abs() < 1e-12, "{}", s.lr(10));
        assert!(
            (s.lr(5) - 0.6).abs() < 1e-12,
            "4 of 9 decay steps: {}",
            s.lr(5)
        );
        let c = Schedule::new(&config("lr_schedule = \"cosine\"\nlr_warmup_steps = 4"), 11);
        assert_eq!((c.lr(0), c.lr(1), c.lr(3)), (0.25, 0.5, 1.0));
        assert!(c.lr(10).abs() < 1e-12);
        assert!(
            (c.lr(6) - 0.75).abs() < 1e-12,
            "a third of the way: {}",
            c.lr(6)
        );
        let constant = Schedule::new(&config(""), 11);
        assert!((0..11).all(|s| constant.lr(s) == 1.0));
    }

    #[test]
    fn l1_ramps_from_zero() {
        let s = Schedule::new(&config("l1_warmup_steps = 4"), 11);
        assert_eq!((s.l1(0), s.l1(3), s.l1(9)), (0.125, 0.5, 0.5));
    }
}
