//! What a training gives its MLflow run: its progress as metric points at
//! their steps, its config as params, who it is as tags.

use super::mlflow::{Point, MAX_PARAM_VALUE};
use crate::model::{EventPayload, StoredEvent};
use cohort_spec::progress::ProgressLine;
use serde_json::Value;

/// The metric points of one event (none for events that are not progress).
/// Non-finite values are left out: MLflow's JSON has no NaN.
pub fn of_event(e: &StoredEvent) -> Vec<Point> {
    let EventPayload::Rank(line) = &e.payload else {
        return Vec::new();
    };
    let at = e.time.timestamp_millis();
    let mut values: Vec<(String, f64, i64)> = Vec::new();
    match line {
        ProgressLine::Progress(p) => {
            for (k, v) in [
                ("loss", p.loss),
                ("mse", p.mse),
                ("l1", p.l1),
                ("l0", p.l0),
                ("explained_variance", p.explained_variance),
                ("dead_fraction", p.dead_fraction),
                ("learning_rate", p.learning_rate),
                ("grad_norm", p.grad_norm),
                ("samples_per_sec", p.samples_per_sec),
                ("step_time_ms", p.step_time_ms),
            ] {
                values.push((k.to_string(), v, p.step));
            }
        }
        ProgressLine::Validation {
            step,
            loss,
            mse,
            explained_variance,
            dead_fraction,
            ..
        } => {
            for (k, v) in [
                ("val_loss", *loss),
                ("val_mse", *mse),
                ("val_explained_variance", *explained_variance),
                ("val_dead_fraction", *dead_fraction),
            ] {
                values.push((k.to_string(), v, *step));
            }
        }
        ProgressLine::Metrics(m) => {
            if let Some(loss) = m.loss {
                values.push(("loss".into(), loss, m.step));
            }
            for (k, v) in &m.metrics {
                if k != "loss" {
                    values.push((k.clone(), *v, m.step));
                }
            }
        }
        _ => {}
    }
    values
        .into_iter()
        .filter(|(k, v, _)| v.is_finite() && valid_key(k))
        .map(|(key, value, step)| Point {
            key,
            value,
            step,
            timestamp_ms: at,
        })
        .collect()
}

/// MLflow's key alphabet: letters, digits, `_ - . / space`, at most 250.
fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 250
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./ ".contains(c))
}

/// The config as params: one per leaf, by its dotted path (`optim.lr`),
/// values cut to MLflow's longest.
pub fn params(config: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    flatten("", config, &mut out);
    out.retain(|(k, _)| valid_key(k));
    for (_, v) in &mut out {
        if v.len() > MAX_PARAM_VALUE {
            let mut cut = MAX_PARAM_VALUE;
            while !v.is_char_boundary(cut) {
                cut -= 1;
            }
            v.truncate(cut);
        }
    }
    out
}

fn flatten(prefix: &str, value: &Value, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        Value::Null => {}
        Value::String(s) => out.push((prefix.to_string(), s.clone())),
        other => out.push((prefix.to_string(), other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_config_becomes_dotted_params() {
        let p = params(&json!({
            "model": {"d_sae": 64, "l1_coefficient": 0.001},
            "program": {"command": ["python", "train.py"], "env": {}},
            "name": "sae-l1",
            "none": null,
            "bad key!": 1,
        }));
        assert_eq!(
            p,
            [
                ("model.d_sae".to_string(), "64".to_string()),
                ("model.l1_coefficient".into(), "0.001".into()),
                ("name".into(), "sae-l1".into()),
                ("program.command".into(), r#"["python","train.py"]"#.into()),
            ]
        );
        let long = params(&json!({"x": "é".repeat(MAX_PARAM_VALUE)}));
        assert!(long[0].1.len() <= MAX_PARAM_VALUE);
    }
}
