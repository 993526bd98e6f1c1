//! [`TrainingConfig::validate`]: every value checked, the first problem
//! returned with the dotted path of its field.

use super::*;
use crate::location::Location;

type Checked = Result<(), ConfigError>;

/// The largest `optim.global_batch`: the largest micro-batch at the largest
/// accumulation on 1024 ranks.
const MAX_GLOBAL_BATCH: i64 = 1 << 44;

fn fail(field: &str, reason: impl Into<String>) -> Checked {
    Err(ConfigError::invalid(field, reason))
}

fn finite_at_least(field: &str, value: f64, min: f64) -> Checked {
    if value.is_finite() && value >= min {
        Ok(())
    } else {
        fail(field, format!("must be a finite number >= {min}"))
    }
}

fn within(field: &str, value: i64, range: std::ops::RangeInclusive<i64>) -> Checked {
    if range.contains(&value) {
        Ok(())
    } else {
        fail(
            field,
            format!("must be in {}..={}", range.start(), range.end()),
        )
    }
}

impl TrainingConfig {
    /// Check every value; the first problem found is returned with its field.
    pub fn validate(&self) -> Checked {
        self.tracking.validate()?;
        self.validate_model()?;
        self.validate_optim()?;
        let c = &self.checkpoint;
        if c.every_steps < 0 {
            return fail("checkpoint.every_steps", "must be >= 0");
        }
        if c.keep < 1 {
            return fail("checkpoint.keep", "must be >= 1");
        }
        if let Some(storage) = &c.storage {
            validate_uri("checkpoint.storage", storage)?;
        }
        self.validate_data()?;
        if let Some(v) = &self.validation {
            validate_files("validation", &v.files())?;
            if let Some(every) = v.every_steps {
                if every <= 0 {
                    return fail("validation.every_steps", "must be > 0");
                }
            }
        }
        let r = &self.runtime;
        if let Some(gib) = r.host_memory_gib_per_rank {
            if !(gib.is_finite() && gib > 0.0 && gib <= 4096.0) {
                return fail(
                    "runtime.host_memory_gib_per_rank",
                    "must be in (0, 4096] GiB",
                );
            }
        }
        if !(r.bucket_mb.is_finite() && r.bucket_mb > 0.0 && r.bucket_mb <= 4096.0) {
            return fail("runtime.bucket_mb", "must be in (0, 4096] MiB");
        }
        if r.min_micro_batch < 1 {
            return fail("runtime.min_micro_batch", "must be >= 1");
        }
        for (name, value) in &r.nccl_env {
            if let Some(why) = super::nccl::refusal(name, value) {
                return fail(&format!("runtime.nccl_env.{name}"), why);
            }
        }
        if r.log_every_steps <= 0 {
            return fail("runtime.log_every_steps", "must be > 0");
        }
        r.schedule().validate("runtime")?;
        for (field, secs) in [
            ("runtime.rendezvous_timeout_s", r.rendezvous_timeout_s),
            ("runtime.collective_timeout_s", r.collective_timeout_s),
        ] {
            if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
                return fail(field, "must be in (0, 86400] seconds");
            }
        }
        Ok(())
    }

    fn validate_model(&self) -> Checked {
        let m = &self.model;
        within("model.d_in", m.d_in, 1..=1 << 20)?;
        match (m.d_sae, m.expansion_factor) {
            (Some(_), Some(_)) => {
                return fail("model.d_sae", "give d_sae or expansion_factor, not both")
            }
            (Some(d), None) => within("model.d_sae", d, 1..=1 << 24)?,
            (None, Some(f)) => within("model.expansion_factor", f, 1..=1024)?,
            (None, None) => {}
        }
        if m.d_sae.is_none() && self.d_sae() > 1 << 24 {
            return fail(
                "model.expansion_factor",
                "d_in x expansion_factor must be at most 16777216",
            );
        }
        finite_at_least("model.l1_coefficient", m.l1_coefficient, 0.0)?;
        finite_at_least("model.aux_coefficient", m.aux_coefficient, 0.0)?;
        let d_sae = self.d_sae();
        match m.architecture {
            Architecture::Topk => {
                let Some(k) = m.k else {
                    return fail("model.k", "required with architecture = \"topk\"");
                };
                within("model.k", k, 1..=d_sae)?;
                if let Some(aux_k) = m.aux_k {
                    within("model.aux_k", aux_k, 1..=d_sae)?;
                }
            }
            Architecture::Relu => {
                for (field, set) in [
                    ("model.k", m.k.is_some()),
                    ("model.aux_k", m.aux_k.is_some()),
                    ("model.aux_coefficient", m.aux_coefficient != 0.0),
                ] {
                    if set {
                        return fail(field, "only for architecture = \"topk\"");
                    }
                }
            }
        }
        within(
            "model.dead_window_samples",
            m.dead_window_samples,
            1..=i64::MAX,
        )
    }

    fn validate_optim(&self) -> Checked {
        let o = &self.optim;
        if !(o.learning_rate.is_finite() && o.learning_rate > 0.0) {
            return fail("optim.learning_rate", "must be > 0");
        }
        if !(1..=1 << 24).contains(&o.batch_size) {
            return fail(
                "optim.batch_size",
                "must be in 1..=16777216 (it is per rank)",
            );
        }
        match (o.steps, o.epochs) {
            (Some(_), Some(_)) => return fail("optim.steps", "give steps or epochs, not both"),
            (None, None) => return fail("optim.steps", "give steps or epochs"),
            (Some(s), None) if s <= 0 => return fail("optim.steps", "must be > 0"),
            (None, Some(e)) if e <= 0 => return fail("optim.epochs", "must be > 0"),
            _ => {}
        }
        for (field, beta) in [("optim.beta1", o.beta1), ("optim.beta2", o.beta2)] {
            if !(0.0..1.0).contains(&beta) {
                return fail(field, "must be in [0, 1)");
            }
        }
        if !(o.eps.is_finite() && o.eps > 0.0) {
            return fail("optim.eps", "must be > 0");
        }
        within("optim.lr_warmup_steps", o.lr_warmup_steps, 0..=i64::MAX)?;
        within("optim.l1_warmup_steps", o.l1_warmup_steps, 0..=i64::MAX)?;
        if !(0.0..=1.0).contains(&o.lr_min_ratio) {
            return fail("optim.lr_min_ratio", "must be in [0, 1]");
        }
        finite_at_least("optim.max_grad_norm", o.max_grad_norm, 0.0)?;
        within(
            "optim.accumulation_steps",
            o.accumulation_steps,
            1..=crate::elastic::MAX_ACCUMULATION,
        )?;
        if let Some(global) = o.global_batch {
            within("optim.global_batch", global, 1..=MAX_GLOBAL_BATCH)?;
        }
        within(
            "optim.max_nonfinite_steps",
            o.max_nonfinite_steps,
            0..=1_000_000,
        )
    }

    fn validate_data(&self) -> Checked {
        let d = &self.data;
        for (field, value, max) in [
            ("data.shuffle_chunk", d.shuffle_chunk, 1 << 20),
            ("data.shuffle_buffer", d.shuffle_buffer, 1 << 26),
            ("data.prefetch_batches", d.prefetch_batches, 64),
        ] {
            within(field, value, 1..=max)?;
        }
        match (&d.synthetic, &d.files) {
            (Some(_), Some(_)) => fail("data", "give [data.synthetic] or [data.files], not both"),
            (None, None) => fail("data", "give [data.synthetic] or [data.files]"),
            (Some(s), None) => self.validate_synthetic(s),
            (None, Some(f)) => validate_files("data.files", f),
        }
    }

    fn validate_synthetic(&self, s: &SyntheticData) -> Checked {
        if s.num_samples <= 0 {
            return fail("data.synthetic.num_samples", "must be > 0");
        }
        within("data.synthetic.num_features", s.num_features, 1..=1 << 20)?;
        if (s.num_features as u64).saturating_mul(self.model.d_in as u64)
            > MAX_SYNTHETIC_FEATURE_ELEMENTS
        {
            return fail(
                "data.synthetic.num_features",
                format!(
                    "num_features x d_in must be at most {MAX_SYNTHETIC_FEATURE_ELEMENTS} elements"
                ),
            );
        }
        if !(s.feature_probability > 0.0 && s.feature_probability <= 1.0) {
            return fail("data.synthetic.feature_probability", "must be in (0, 1]");
        }
        finite_at_least("data.synthetic.noise_std", s.noise_std, 0.0)
    }
}

/// A path, `file://` or `s3://bucket/...` URI: its form only.
fn validate_uri(field: &str, p: &str) -> Checked {
    if p.trim().is_empty() || p.contains('\0') {
        return fail(field, "an entry is empty");
    }
    match Location::parse(p) {
        Ok(_) => Ok(()),
        Err(e) => fail(field, e),
    }
}

/// The entries' form only: whether they exist is for the rank to find out,
/// on the host that reads them. `table` is `data.files` or `validation`.
fn validate_files(table: &str, f: &FileData) -> Checked {
    let field = format!("{table}.paths");
    if f.paths.is_empty() {
        return fail(&field, "give at least one entry");
    }
    for p in &f.paths {
        validate_uri(&field, p)?;
    }
    for (key, name) in [("tensor", &f.tensor), ("column", &f.column)] {
        if name.as_deref().is_some_and(str::is_empty) {
            return fail(&format!("{table}.{key}"), "must not be empty");
        }
    }
    Ok(())
}
