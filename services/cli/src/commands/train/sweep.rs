//! `cohort train sweep`: a grid of trainings from one base config, each a
//! training of its own labelled `sweep=NAME` and `KEY=VALUE` per swept
//! field, so `train list --label sweep=NAME` and the console's comparison
//! page (`/compare?sweep=NAME`) find them together.

use crate::client::Coordinator;
use crate::errors::CliError;
use crate::render::{emit, emit_json, json, OutputFormat};
use clap::Args;
use cohort_proto::v1::{
    self, training_service_client::TrainingServiceClient, CreateTrainingRequest,
};
use cohort_spec::Workload;
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;

/// The most trainings one sweep submits.
pub const MAX_GRID: usize = 256;

#[derive(Debug, Clone, Args)]
pub struct SweepArgs {
    /// The base config (TOML, or `.json`).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// A swept field and its values: `model.k=16,32,64` (repeat for a grid
    /// over several fields: every combination is submitted).
    #[arg(long = "set", value_name = "KEY=V1,V2,...", required = true)]
    pub set: Vec<String>,
    /// The sweep's name: the `sweep` label of its trainings (default: `sweep-` and the time).
    #[arg(long)]
    pub name: Option<String>,
    /// GPUs per training (default: as many as fit).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(1..))]
    pub gpus: Option<i32>,
    /// Scheduling priority of every training of the sweep.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i32,
    /// More labels for every training of the sweep (KEY=VALUE, repeatable).
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = super::parse_label)]
    pub labels: Vec<(String, String)>,
    /// Print the grid without submitting anything.
    #[arg(long)]
    pub dry_run: bool,
}

/// One swept field: its dotted path and values.
#[derive(Debug, Clone, PartialEq)]
struct Axis {
    key: String,
    values: Vec<String>,
}

fn axis(spec: &str) -> Result<Axis, CliError> {
    let bad = |why: &str| CliError::Usage(format!("--set {spec}: {why}"));
    let (key, values) = spec
        .split_once('=')
        .ok_or_else(|| bad("expected KEY=V1,V2,..."))?;
    let key = key.trim();
    if key.is_empty() || key.split('.').any(str::is_empty) {
        return Err(bad("the key is a dotted path such as model.k"));
    }
    let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).collect();
    if values.iter().any(String::is_empty) {
        return Err(bad("empty value"));
    }
    Ok(Axis {
        key: key.to_string(),
        values,
    })
}

/// Every combination, first axis slowest.
fn grid(axes: &[Axis]) -> Vec<Vec<(String, String)>> {
    let mut out: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for a in axes {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                a.values.iter().map(move |v| {
                    let mut p = prefix.clone();
                    p.push((a.key.clone(), v.clone()));
                    p
                })
            })
            .collect();
    }
    out
}

/// The base config with one combination applied, validated.
fn apply(base: &Workload, combo: &[(String, String)]) -> Result<Workload, CliError> {
    let params = combo
        .iter()
        .map(|(k, v)| (k.clone(), cohort_spec::sweep::scalar(v)))
        .collect();
    cohort_spec::sweep::apply(base, &params).map_err(CliError::Config)
}

fn default_name() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("sweep-{secs}")
}

pub async fn sweep(
    coordinator: &Coordinator,
    args: &SweepArgs,
    out: OutputFormat,
) -> Result<(), CliError> {
    let axes = args
        .set
        .iter()
        .map(|s| axis(s))
        .collect::<Result<Vec<_>, _>>()?;
    let combos = grid(&axes);
    if combos.len() > MAX_GRID {
        return Err(CliError::Usage(format!(
            "the grid has {} trainings; at most {MAX_GRID} per sweep",
            combos.len()
        )));
    }
    let name = args.name.clone().unwrap_or_else(default_name);
    let base = Workload::from_file(&args.config).map_err(CliError::Config)?;
    // Every config is checked before anything is submitted.
    let configs = combos
        .iter()
        .map(|c| apply(&base, c))
        .collect::<Result<Vec<_>, _>>()?;
    let mut client = match args.dry_run {
        true => None,
        false => Some(TrainingServiceClient::new(coordinator.channel().await?)),
    };
    let mut submitted = Vec::new();
    for (i, (combo, config)) in combos.iter().zip(&configs).enumerate() {
        let mut labels: HashMap<String, String> = args.labels.iter().cloned().collect();
        labels.extend(combo.iter().cloned());
        labels.insert("sweep".into(), name.clone());
        let display = combo
            .iter()
            .map(|(k, v)| format!("{}={v}", k.rsplit('.').next().unwrap_or(k)))
            .collect::<Vec<_>>()
            .join(" ");
        let request = CreateTrainingRequest {
            // A retried sweep creates nothing twice.
            request_id: format!("{name}/{i}"),
            config: Some(v1::TrainingConfig::from(config)),
            gpus: Some(v1::GpuRequest {
                selection: args.gpus.map(v1::gpu_request::Selection::Count),
                ..Default::default()
            }),
            display_name: format!("{name} {display}"),
            priority: args.priority,
            labels,
            ..Default::default()
        };
        match client.as_mut() {
            Some(c) => submitted.push((
                combo.clone(),
                Some(c.create_training(request).await?.into_inner()),
            )),
            None => submitted.push((combo.clone(), None)),
        }
    }
    if out == OutputFormat::Json {
        let trainings: Vec<Value> = submitted
            .iter()
            .filter_map(|(_, t)| t.as_ref().map(json::message))
            .collect();
        return emit_json(&serde_json::json!({ "sweep": name, "trainings": trainings }));
    }
    let mut lines = vec![format!(
        "sweep {name}: {} trainings{}",
        submitted.len(),
        if args.dry_run {
            " (dry run: nothing submitted)"
        } else {
            ""
        }
    )];
    for (combo, training) in &submitted {
        let id = training.as_ref().map_or("-", |t| t.id.as_str());
        let params = combo
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("  ");
        lines.push(format!("  {id}  {params}"));
    }
    lines.push(format!(
        "list them:   cohort train list --label sweep={name}"
    ));
    lines.push(format!(
        "compare:     {}/compare?sweep={name}",
        coordinator.url.trim_end_matches('/')
    ));
    emit(&lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grid_is_every_combination() {
        let axes = vec![
            axis("model.k=16,32,64").unwrap(),
            axis("optim.learning_rate=1e-3,3e-4").unwrap(),
        ];
        let g = grid(&axes);
        assert_eq!(g.len(), 6);
        assert_eq!(
            g[0],
            vec![
                ("model.k".into(), "16".into()),
                ("optim.learning_rate".into(), "1e-3".into())
            ]
        );
        assert_eq!(
            g[5],
            vec![
                ("model.k".into(), "64".into()),
                ("optim.learning_rate".into(), "3e-4".into())
            ]
        );
    }

    #[test]
    fn bad_axes_are_refused() {
        for bad in ["model.k", "=1,2", "model..k=1", "model.k=1,,2"] {
            assert!(axis(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn values_apply_as_typed_and_are_validated() {
        let text = "[model]\nd_in = 8\narchitecture = \"topk\"\nk = 4\n[optim]\nbatch_size = 4\nsteps = 5\n[data.synthetic]\nnum_samples = 64\n";
        let base = Workload::from_toml(text).unwrap();
        let w = apply(
            &base,
            &[
                ("model.k".into(), "16".into()),
                ("optim.learning_rate".into(), "3e-4".into()),
            ],
        )
        .unwrap();
        let v = serde_json::to_value(&w).unwrap();
        assert_eq!(v["model"]["k"], 16);
        assert_eq!(v["optim"]["learning_rate"], 3e-4);
        assert!(apply(&base, &[("model.k".into(), "zero".into())]).is_err());
    }
}
