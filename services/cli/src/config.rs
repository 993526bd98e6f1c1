//! The training config of `cohort train submit`: a TOML/JSON file, flags, or
//! a file with flags overriding some of its fields.
//!
//! Both paths end in the same strict parser (`cohort_spec::TrainingConfig`):
//! the file's config and the flags are merged as JSON with the file's keys and
//! parsed once, so defaults, unknown-key checks and validation live in one place.

use crate::errors::CliError;
use clap::Args;
use cohort_spec::elastic::Gpus;
use cohort_spec::Workload;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};

/// The common config fields as flags. Without `--config`, `--d-in`,
/// `--batch-size`, `--steps` or `--epochs`, and a data source are required.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Config fields (the whole config without --config, else overrides)")]
pub struct ConfigFlags {
    /// `model.d_in`: the width of the activations.
    #[arg(long, value_name = "N", required_unless_present = "config")]
    pub d_in: Option<i64>,
    /// `model.d_sae`: the width of the sparse code.
    #[arg(long, value_name = "N", conflicts_with = "expansion_factor")]
    pub d_sae: Option<i64>,
    /// `model.expansion_factor`: d_sae as a multiple of d_in.
    #[arg(long, value_name = "N")]
    pub expansion_factor: Option<i64>,
    /// `model.l1_coefficient`: the weight of the sparsity penalty.
    #[arg(long, value_name = "X")]
    pub l1_coefficient: Option<f64>,
    /// `model.dtype`.
    #[arg(long, value_parser = ["f32", "bf16", "f16"])]
    pub dtype: Option<String>,
    /// `optim.batch_size`: samples per step per rank.
    #[arg(long, value_name = "N", required_unless_present = "config")]
    pub batch_size: Option<i64>,
    /// `optim.steps` (replaces `optim.epochs`).
    #[arg(long, value_name = "N", required_unless_present_any = ["config", "epochs"])]
    pub steps: Option<i64>,
    /// `optim.epochs` (replaces `optim.steps`).
    #[arg(long, value_name = "N", conflicts_with = "steps")]
    pub epochs: Option<i64>,
    /// `optim.learning_rate`.
    #[arg(long, value_name = "LR")]
    pub learning_rate: Option<f64>,
    /// `optim.seed`.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// `checkpoint.every_steps` (0: only the final checkpoint).
    #[arg(long, value_name = "N")]
    pub checkpoint_every: Option<i64>,
    /// Train on synthetic data with this many samples (`data.synthetic.num_samples`).
    #[arg(
        long,
        value_name = "N",
        conflicts_with = "data_files",
        required_unless_present_any = ["config", "data_files"]
    )]
    pub synthetic_samples: Option<i64>,
    /// Train on these activation shards (`data.files.paths`): .npy, .safetensors
    /// or .parquet files, directories, glob patterns, or s3://bucket/prefix/.
    #[arg(long, value_name = "PATH,...", value_delimiter = ',', num_args = 1..)]
    pub data_files: Vec<PathBuf>,
    /// `runtime.device`.
    #[arg(long, value_parser = ["auto", "cpu", "cuda"])]
    pub device: Option<String>,
}

/// Sets `value[table][key]`, creating the table, and removes `unset` keys
/// (the alternatives `key` replaces).
fn set(value: &mut Value, table: &str, key: &str, field: Value, unset: &[&str]) {
    let table = &mut value[table];
    if !table.is_object() {
        *table = Value::Object(Map::new());
    }
    if let Value::Object(map) = table {
        for other in unset {
            map.remove(*other);
        }
        map.insert(key.to_string(), field);
    }
}

/// The config from `file` (if any) with the flags applied, parsed and validated.
/// A program's config (`[program]`) takes none of the SAE's flags.
#[cfg(test)]
pub fn build(file: Option<&Path>, flags: &ConfigFlags) -> Result<Workload, CliError> {
    build_job(file, flags).map(|(workload, _)| workload)
}

/// [`build`], and the job file's `gpus` (a count or a range) when it has one.
pub fn build_job(
    file: Option<&Path>,
    flags: &ConfigFlags,
) -> Result<(Workload, Option<Gpus>), CliError> {
    let (mut value, gpus) = match file {
        Some(path) => {
            let (config, gpus) = Workload::from_job_file(path).map_err(CliError::Config)?;
            (
                serde_json::to_value(&config).unwrap_or_else(|_| json!({})),
                gpus,
            )
        }
        None => (json!({}), None),
    };
    let f = flags;
    if let Some(n) = f.d_in {
        set(&mut value, "model", "d_in", n.into(), &[]);
    }
    if let Some(n) = f.d_sae {
        set(
            &mut value,
            "model",
            "d_sae",
            n.into(),
            &["expansion_factor"],
        );
    }
    if let Some(n) = f.expansion_factor {
        set(
            &mut value,
            "model",
            "expansion_factor",
            n.into(),
            &["d_sae"],
        );
    }
    if let Some(x) = f.l1_coefficient {
        set(&mut value, "model", "l1_coefficient", x.into(), &[]);
    }
    if let Some(d) = &f.dtype {
        set(&mut value, "model", "dtype", d.as_str().into(), &[]);
    }
    if let Some(n) = f.batch_size {
        set(&mut value, "optim", "batch_size", n.into(), &[]);
    }
    if let Some(n) = f.steps {
        set(&mut value, "optim", "steps", n.into(), &["epochs"]);
    }
    if let Some(n) = f.epochs {
        set(&mut value, "optim", "epochs", n.into(), &["steps"]);
    }
    if let Some(x) = f.learning_rate {
        set(&mut value, "optim", "learning_rate", x.into(), &[]);
    }
    if let Some(n) = f.seed {
        set(&mut value, "optim", "seed", n.into(), &[]);
    }
    if let Some(n) = f.checkpoint_every {
        set(&mut value, "checkpoint", "every_steps", n.into(), &[]);
    }
    if let Some(n) = f.synthetic_samples {
        // Keep the file's other synthetic settings when it has a synthetic source.
        let mut synthetic = value["data"]["synthetic"].clone();
        if !synthetic.is_object() {
            synthetic = json!({});
        }
        synthetic["num_samples"] = n.into();
        set(&mut value, "data", "synthetic", synthetic, &["files"]);
    }
    if !f.data_files.is_empty() {
        let paths: Vec<Value> = f
            .data_files
            .iter()
            .map(|p| p.to_string_lossy().into_owned().into())
            .collect();
        set(
            &mut value,
            "data",
            "files",
            json!({ "paths": paths }),
            &["synthetic"],
        );
    }
    if let Some(d) = &f.device {
        set(&mut value, "runtime", "device", d.as_str().into(), &[]);
    }
    let workload = Workload::from_value(value).map_err(|e| match e {
        // A parse error here is about the merged flags, not JSON the user wrote.
        cohort_spec::ConfigError::Parse { reason, .. } => {
            CliError::Config(cohort_spec::ConfigError::Invalid {
                field: "config".to_string(),
                reason,
            })
        }
        other => CliError::Config(other),
    })?;
    Ok((workload, gpus))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn submit(argv: &[&str]) -> Result<crate::commands::train::SubmitArgs, clap::Error> {
        let argv = ["cohort", "train", "submit"].iter().chain(argv.iter());
        match crate::Cli::try_parse_from(argv)?.command {
            crate::Command::Train(crate::commands::train::TrainCommand::Submit(args)) => Ok(*args),
            other => panic!("{other:?}"),
        }
    }

    fn file(name: &str, text: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!("cohort-cli-{}-{name}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn whole_config_from_flags() {
        let args = submit(&[
            "--d-in",
            "64",
            "--expansion-factor",
            "8",
            "--batch-size",
            "32",
            "--steps",
            "100",
            "--synthetic-samples",
            "4096",
            "--device",
            "cpu",
        ])
        .unwrap();
        let c = build(None, &args.fields).unwrap().sae().cloned().unwrap();
        assert_eq!(c.model.d_in, 64);
        assert_eq!(c.d_sae(), 512);
        assert_eq!(c.optim.batch_size, 32);
        assert_eq!(c.optim.steps, Some(100));
        assert_eq!(c.data.synthetic.as_ref().unwrap().num_samples, 4096);
        assert_eq!(c.runtime.device, cohort_spec::config::Device::Cpu);
        // Defaults come from cohort-spec.
        assert_eq!(c.optim.learning_rate, 1e-3);
    }

    #[test]
    fn flags_without_a_file_must_be_complete() {
        let err = submit(&["--d-in", "64", "--steps", "10"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        let text = err.to_string();
        assert!(text.contains("--batch-size"), "{text}");
        assert!(text.contains("--synthetic-samples"), "{text}");
    }

    #[test]
    fn flags_override_the_file() {
        let path = file(
            "override.toml",
            "[model]\nd_in = 8\nexpansion_factor = 2\n[optim]\nbatch_size = 4\nepochs = 3\n\
             [data.synthetic]\nnum_samples = 64\nnum_features = 32\n",
        );
        let p = path.to_str().unwrap();
        let args = submit(&[
            "--config",
            p,
            "--d-sae",
            "24",
            "--steps",
            "7",
            "--synthetic-samples",
            "128",
        ])
        .unwrap();
        let c = build(args.config.as_deref(), &args.fields)
            .unwrap()
            .sae()
            .cloned()
            .unwrap();
        assert_eq!((c.model.d_sae, c.model.expansion_factor), (Some(24), None));
        assert_eq!((c.optim.steps, c.optim.epochs), (Some(7), None));
        let synthetic = c.data.synthetic.unwrap();
        assert_eq!((synthetic.num_samples, synthetic.num_features), (128, 32));

        let args = submit(&["--config", p, "--data-files", "a.npy,b.npy"]).unwrap();
        let c = build(args.config.as_deref(), &args.fields)
            .unwrap()
            .sae()
            .cloned()
            .unwrap();
        assert!(c.data.synthetic.is_none());
        assert_eq!(c.data.files.unwrap().paths.len(), 2);

        let args = submit(&["--config", p, "--batch-size", "0"]).unwrap();
        let err = build(args.config.as_deref(), &args.fields).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("the config is invalid: optim.batch_size"),
            "{err}"
        );
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_job_file_may_say_its_gpus() {
        let dir = std::env::temp_dir().join(format!("cohort-cli-gpus-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let base = "[model]\nd_in = 8\n[optim]\nbatch_size = 8\nsteps = 3\n[data.synthetic]\nnum_samples = 64\n";
        let toml = dir.join("job.toml");
        std::fs::write(&toml, format!("gpus = {{ min = 2, max = 4 }}\n{base}")).unwrap();
        let (w, gpus) = build_job(Some(&toml), &ConfigFlags::default()).unwrap();
        assert_eq!(
            gpus,
            Some(Gpus::Range(cohort_spec::elastic::SizeRange {
                min: 2,
                max: 4
            }))
        );
        assert_eq!(w.sae().unwrap().optim.batch_size, 8);
        let json = dir.join("job.json");
        std::fs::write(&json, r#"{"gpus": 3, "model": {"d_in": 8}, "optim": {"batch_size": 8, "steps": 3}, "data": {"synthetic": {"num_samples": 64}}}"#).unwrap();
        let (_, gpus) = build_job(Some(&json), &ConfigFlags::default()).unwrap();
        assert_eq!(gpus, Some(Gpus::Count(3)));
        std::fs::write(&toml, format!("gpus = \"many\"\n{base}")).unwrap();
        let err = build_job(Some(&toml), &ConfigFlags::default()).unwrap_err();
        assert!(err.to_string().contains("gpus: give a count"), "{err}");
        std::fs::write(&toml, base).unwrap();
        let (_, gpus) = build_job(Some(&toml), &ConfigFlags::default()).unwrap();
        assert_eq!(gpus, None, "no gpus key: the flags or auto decide");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn missing_file_is_a_human_error() {
        let err = build(
            Some(Path::new("/nonexistent/job.toml")),
            &ConfigFlags::default(),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("cannot read the config /nonexistent/job.toml"),
            "{err}"
        );
    }
}
