//! Conversions between the API's `cohort.v1.TrainingConfig` and the domain
//! [`cohort_spec::TrainingConfig`].
//!
//! Proto -> domain validates once, on receive: an unset `optional` field takes
//! the default cohort-spec defines (the proto message is turned into the same
//! keys as the TOML/JSON config, so defaults and strictness live in one place),
//! then [`TrainingConfig::validate`] runs. Every error names the field by its
//! dotted path, ready for a `google.rpc.BadRequest`.
//!
//! Domain -> proto sets every field explicitly, so a round trip is lossless.

use crate::v1;
use runtime::runtime_table;

mod runtime;
use cohort_spec::config::{
    Architecture, BDecInit, CheckpointConfig, DataConfig, DecoderNorm, Dtype, FileData, LrSchedule,
    ModelConfig, OptimConfig, SyntheticData, ValidationConfig,
};
use cohort_spec::{ConfigError, TrainingConfig};
use serde_json::{Map, Value};

fn invalid(field: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.to_string(),
        reason: reason.into(),
    }
}

/// One config table being assembled, with the dotted path of its fields.
struct Table {
    path: &'static str,
    keys: Map<String, Value>,
}

impl Table {
    fn new(path: &'static str) -> Self {
        Self {
            path,
            keys: Map::new(),
        }
    }

    fn set(&mut self, key: &str, value: impl Into<Value>) {
        self.keys.insert(key.to_string(), value.into());
    }

    fn opt(&mut self, key: &str, value: Option<impl Into<Value>>) {
        if let Some(v) = value {
            self.set(key, v);
        }
    }

    /// A double that must be finite (JSON has no NaN or infinity).
    fn float(&mut self, key: &str, value: Option<f64>) -> Result<(), ConfigError> {
        match value {
            Some(v) if !v.is_finite() => Err(invalid(
                &format!("{}.{key}", self.path),
                "must be a finite number",
            )),
            v => {
                self.opt(key, v);
                Ok(())
            }
        }
    }

    /// An enum: unspecified leaves the default, an unknown number is an error.
    fn enumeration<E: TryFrom<i32>>(
        &mut self,
        key: &str,
        raw: i32,
        name: impl Fn(E) -> Option<&'static str>,
    ) -> Result<(), ConfigError> {
        let field = || format!("{}.{key}", self.path);
        let value =
            E::try_from(raw).map_err(|_| invalid(&field(), format!("unknown value {raw}")))?;
        self.opt(key, name(value));
        Ok(())
    }

    fn into_value(self) -> Value {
        Value::Object(self.keys)
    }
}

fn required<T>(value: Option<T>, field: &str) -> Result<T, ConfigError> {
    value.ok_or_else(|| invalid(field, "required"))
}

fn model_table(m: v1::ModelConfig) -> Result<Value, ConfigError> {
    let mut t = Table::new("model");
    t.set("d_in", m.d_in);
    t.opt("d_sae", m.d_sae);
    t.opt("expansion_factor", m.expansion_factor);
    t.float("l1_coefficient", m.l1_coefficient)?;
    t.enumeration("dtype", m.dtype, |d: v1::Dtype| match d {
        v1::Dtype::Unspecified => None,
        v1::Dtype::F32 => Some("f32"),
        v1::Dtype::Bf16 => Some("bf16"),
        v1::Dtype::F16 => Some("f16"),
    })?;
    t.enumeration(
        "architecture",
        m.architecture,
        |a: v1::Architecture| match a {
            v1::Architecture::Unspecified => None,
            v1::Architecture::Relu => Some("relu"),
            v1::Architecture::Topk => Some("topk"),
        },
    )?;
    t.opt("k", m.k);
    t.opt("aux_k", m.aux_k);
    t.float("aux_coefficient", m.aux_coefficient)?;
    t.enumeration(
        "decoder_norm",
        m.decoder_norm,
        |n: v1::DecoderNorm| match n {
            v1::DecoderNorm::Unspecified => None,
            v1::DecoderNorm::Unit => Some("unit"),
            v1::DecoderNorm::None => Some("none"),
        },
    )?;
    t.enumeration("b_dec_init", m.b_dec_init, |b: v1::BDecInit| match b {
        v1::BDecInit::Unspecified => None,
        v1::BDecInit::Zeros => Some("zeros"),
        v1::BDecInit::Mean => Some("mean"),
    })?;
    t.opt("apply_b_dec_to_input", m.apply_b_dec_to_input);
    t.opt("dead_window_samples", m.dead_window_samples);
    Ok(t.into_value())
}

fn optim_table(o: v1::OptimConfig) -> Result<Value, ConfigError> {
    let mut t = Table::new("optim");
    t.float("learning_rate", o.learning_rate)?;
    t.set("batch_size", o.batch_size);
    t.opt("steps", o.steps);
    t.opt("epochs", o.epochs);
    t.opt("seed", o.seed);
    t.float("beta1", o.beta1)?;
    t.float("beta2", o.beta2)?;
    t.float("eps", o.eps)?;
    t.opt("allow_batch_shrink", o.allow_batch_shrink);
    t.enumeration("lr_schedule", o.lr_schedule, |l: v1::LrSchedule| match l {
        v1::LrSchedule::Unspecified => None,
        v1::LrSchedule::Constant => Some("constant"),
        v1::LrSchedule::Cosine => Some("cosine"),
        v1::LrSchedule::Linear => Some("linear"),
    })?;
    t.opt("lr_warmup_steps", o.lr_warmup_steps);
    t.float("lr_min_ratio", o.lr_min_ratio)?;
    t.opt("l1_warmup_steps", o.l1_warmup_steps);
    t.float("max_grad_norm", o.max_grad_norm)?;
    t.opt("accumulation_steps", o.accumulation_steps);
    t.opt("max_nonfinite_steps", o.max_nonfinite_steps);
    t.opt("global_batch", o.global_batch);
    Ok(t.into_value())
}

pub(crate) fn checkpoint_table(c: v1::CheckpointConfig) -> Value {
    let mut t = Table::new("checkpoint");
    t.opt("every_steps", c.every_steps);
    t.opt("keep", c.keep);
    t.opt("storage", c.storage);
    t.into_value()
}

fn data_table(d: Option<v1::DataConfig>) -> Result<Value, ConfigError> {
    let mut t = Table::new("data");
    let d = d.unwrap_or_default();
    t.opt("shuffle_chunk", d.shuffle_chunk);
    t.opt("shuffle_buffer", d.shuffle_buffer);
    t.opt("prefetch_batches", d.prefetch_batches);
    match d.source {
        None => {}
        Some(v1::data_config::Source::Synthetic(s)) => {
            let mut st = Table::new("data.synthetic");
            st.set("num_samples", s.num_samples);
            st.opt("num_features", s.num_features);
            st.float("feature_probability", s.feature_probability)?;
            st.float("noise_std", s.noise_std)?;
            t.set("synthetic", st.into_value());
        }
        Some(v1::data_config::Source::Files(f)) => {
            let mut ft = Table::new("data.files");
            ft.set("paths", f.paths);
            ft.opt("tensor", f.tensor);
            ft.opt("column", f.column);
            t.set("files", ft.into_value());
        }
    }
    Ok(t.into_value())
}

fn validation_table(v: v1::ValidationConfig) -> Value {
    let mut t = Table::new("validation");
    t.set("paths", v.paths);
    t.opt("tensor", v.tensor);
    t.opt("column", v.column);
    t.opt("every_steps", v.every_steps);
    t.into_value()
}

impl TryFrom<v1::TrainingConfig> for TrainingConfig {
    type Error = ConfigError;

    fn try_from(p: v1::TrainingConfig) -> Result<Self, ConfigError> {
        if p.program.is_some() {
            return Err(invalid("program", "a program is not the built-in SAE"));
        }
        let mut root = Map::new();
        root.insert("model".into(), model_table(required(p.model, "model")?)?);
        root.insert("optim".into(), optim_table(required(p.optim, "optim")?)?);
        if let Some(c) = p.checkpoint {
            root.insert("checkpoint".into(), checkpoint_table(c));
        }
        root.insert("data".into(), data_table(p.data)?);
        if let Some(r) = p.runtime {
            root.insert("runtime".into(), runtime_table(r)?);
        }
        if let Some(v) = p.validation {
            root.insert("validation".into(), validation_table(v));
        }
        if let Some(t) = tracking_table(p.tracking) {
            root.insert("tracking".into(), t);
        }
        let config: TrainingConfig =
            serde_json::from_value(Value::Object(root)).map_err(|e| ConfigError::Parse {
                format: "protobuf",
                reason: e.to_string(),
            })?;
        config.validate()?;
        Ok(config)
    }
}

impl From<&ModelConfig> for v1::ModelConfig {
    fn from(m: &ModelConfig) -> Self {
        Self {
            d_in: m.d_in,
            d_sae: m.d_sae,
            expansion_factor: m.expansion_factor,
            l1_coefficient: Some(m.l1_coefficient),
            dtype: match m.dtype {
                Dtype::F32 => v1::Dtype::F32,
                Dtype::Bf16 => v1::Dtype::Bf16,
                Dtype::F16 => v1::Dtype::F16,
            } as i32,
            architecture: match m.architecture {
                Architecture::Relu => v1::Architecture::Relu,
                Architecture::Topk => v1::Architecture::Topk,
            } as i32,
            k: m.k,
            aux_k: m.aux_k,
            aux_coefficient: Some(m.aux_coefficient),
            decoder_norm: match m.decoder_norm {
                DecoderNorm::Unit => v1::DecoderNorm::Unit,
                DecoderNorm::None => v1::DecoderNorm::None,
            } as i32,
            b_dec_init: match m.b_dec_init {
                BDecInit::Zeros => v1::BDecInit::Zeros,
                BDecInit::Mean => v1::BDecInit::Mean,
            } as i32,
            apply_b_dec_to_input: Some(m.apply_b_dec_to_input),
            dead_window_samples: Some(m.dead_window_samples),
        }
    }
}

impl From<&OptimConfig> for v1::OptimConfig {
    fn from(o: &OptimConfig) -> Self {
        Self {
            learning_rate: Some(o.learning_rate),
            batch_size: o.batch_size,
            steps: o.steps,
            epochs: o.epochs,
            seed: Some(o.seed),
            beta1: Some(o.beta1),
            beta2: Some(o.beta2),
            eps: Some(o.eps),
            allow_batch_shrink: Some(o.allow_batch_shrink),
            lr_schedule: match o.lr_schedule {
                LrSchedule::Constant => v1::LrSchedule::Constant,
                LrSchedule::Cosine => v1::LrSchedule::Cosine,
                LrSchedule::Linear => v1::LrSchedule::Linear,
            } as i32,
            lr_warmup_steps: Some(o.lr_warmup_steps),
            lr_min_ratio: Some(o.lr_min_ratio),
            l1_warmup_steps: Some(o.l1_warmup_steps),
            max_grad_norm: Some(o.max_grad_norm),
            accumulation_steps: Some(o.accumulation_steps),
            max_nonfinite_steps: Some(o.max_nonfinite_steps),
            global_batch: o.global_batch,
        }
    }
}

impl From<&CheckpointConfig> for v1::CheckpointConfig {
    fn from(c: &CheckpointConfig) -> Self {
        Self {
            every_steps: Some(c.every_steps),
            keep: Some(c.keep),
            storage: c.storage.clone(),
        }
    }
}

impl From<&SyntheticData> for v1::SyntheticData {
    fn from(s: &SyntheticData) -> Self {
        Self {
            num_samples: s.num_samples,
            num_features: Some(s.num_features),
            feature_probability: Some(s.feature_probability),
            noise_std: Some(s.noise_std),
        }
    }
}

impl From<&FileData> for v1::FileData {
    fn from(f: &FileData) -> Self {
        Self {
            paths: f.paths.clone(),
            tensor: f.tensor.clone(),
            column: f.column.clone(),
        }
    }
}

impl From<&DataConfig> for v1::DataConfig {
    /// A domain config holding both sources (which validation refuses) keeps
    /// only the synthetic one.
    fn from(d: &DataConfig) -> Self {
        use v1::data_config::Source;
        let source = match (&d.synthetic, &d.files) {
            (Some(s), _) => Some(Source::Synthetic(s.into())),
            (None, Some(f)) => Some(Source::Files(f.into())),
            (None, None) => None,
        };
        Self {
            source,
            shuffle_chunk: Some(d.shuffle_chunk),
            shuffle_buffer: Some(d.shuffle_buffer),
            prefetch_batches: Some(d.prefetch_batches),
        }
    }
}

impl From<&ValidationConfig> for v1::ValidationConfig {
    fn from(v: &ValidationConfig) -> Self {
        Self {
            paths: v.paths.clone(),
            tensor: v.tensor.clone(),
            column: v.column.clone(),
            every_steps: v.every_steps,
        }
    }
}

impl From<&TrainingConfig> for v1::TrainingConfig {
    fn from(c: &TrainingConfig) -> Self {
        Self {
            model: Some((&c.model).into()),
            optim: Some((&c.optim).into()),
            checkpoint: Some((&c.checkpoint).into()),
            data: Some((&c.data).into()),
            runtime: Some((&c.runtime).into()),
            validation: c.validation.as_ref().map(Into::into),
            program: None,
            tracking: tracking_message(&c.tracking),
        }
    }
}

/// `[tracking]` as the config's table (none when nothing is set).
fn tracking_table(t: Option<v1::TrackingConfig>) -> Option<Value> {
    let experiment = t?.experiment?;
    Some(serde_json::json!({ "experiment": experiment }))
}

fn tracking_message(t: &cohort_spec::tracking::TrackingConfig) -> Option<v1::TrackingConfig> {
    (!t.is_empty()).then(|| v1::TrackingConfig {
        experiment: t.experiment.clone(),
    })
}

mod program;

#[cfg(test)]
mod tests;
