//! A program's progress lines: the same `"event"` objects as `cohort-rank`'s
//! (docs/rank.md) but with every field optional beyond the step, and any
//! other numeric field kept as a metric by its name (docs/programs.md).
//!
//! `{"event": "progress", "step": 120, "total_steps": 1000, "loss": 0.41,
//! "episode_return": 87.5}` becomes a [`Metrics`] with `loss` and one
//! metric; a `finished` line the same with `finished` set. What a program
//! does not report stays absent, never zero. Python's `json.dumps` writes
//! a NaN loss as the bare token `NaN`: it is read as a NaN (a training never
//! passes for healthy on a loss it did not have), as are `Infinity` and
//! `-Infinity`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The most metrics one line keeps (beyond step, total_steps and loss).
pub const MAX_METRICS: usize = 64;
/// The longest metric name kept.
pub const MAX_METRIC_NAME: usize = 64;

/// One progress (or final) line of a program.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    pub step: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_steps: Option<i64>,
    /// A non-finite loss is kept (as `null` in JSON, read back as NaN).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "loss_or_nan"
    )]
    pub loss: Option<f64>,
    /// Every other numeric field, by name (non-finite values as NaN).
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "values_or_nan"
    )]
    pub metrics: BTreeMap<String, f64>,
    /// From a `finished` line: the program says it is done.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub finished: bool,
}

/// A present `loss: null` is a loss that was not finite.
fn loss_or_nan<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    Ok(Some(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN)))
}

fn values_or_nan<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, f64>, D::Error> {
    let raw = BTreeMap::<String, Option<f64>>::deserialize(d)?;
    Ok(raw
        .into_iter()
        .map(|(k, v)| (k, v.unwrap_or(f64::NAN)))
        .collect())
}

fn name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_METRIC_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-'))
}

fn number(value: &serde_json::Value) -> Option<f64> {
    match value {
        serde_json::Value::Number(n) => n.as_f64(),
        serde_json::Value::Null => Some(f64::NAN),
        _ => None,
    }
}

impl Metrics {
    /// A program's `progress` or `finished` line; `None` for anything else
    /// (a log line).
    pub fn parse(line: &str) -> Option<Self> {
        let line = line.trim();
        if !line.starts_with('{') || !line.ends_with('}') {
            return None;
        }
        let value: serde_json::Value = serde_json::from_str(line)
            .ok()
            .or_else(|| serde_json::from_str(&non_finite_as_null(line)).ok())?;
        let object = value.as_object()?;
        let finished = match object.get("event")?.as_str()? {
            "progress" => false,
            "finished" => true,
            _ => return None,
        };
        let step = object.get("step")?.as_i64().filter(|s| *s >= 0)?;
        let total_steps = match object.get("total_steps") {
            None => None,
            Some(v) => Some(v.as_i64().filter(|t| *t >= 0)?),
        };
        let loss = match object.get("loss") {
            None => None,
            Some(v) => Some(number(v)?),
        };
        let metrics = object
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "event" | "step" | "total_steps" | "loss"))
            .filter(|(k, _)| name_ok(k))
            .filter_map(|(k, v)| Some((k.clone(), number(v)?)))
            .take(MAX_METRICS)
            .collect();
        Some(Metrics {
            step,
            total_steps,
            loss,
            metrics,
            finished,
        })
    }
}

/// The line with the bare tokens `NaN`, `Infinity` and `-Infinity` outside
/// strings replaced by `null` (what Python's json module writes for them).
fn non_finite_as_null(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    let mut in_string = false;
    while let Some(c) = rest.chars().next() {
        if in_string {
            if c == '\\' {
                let escaped: String = rest.chars().take(2).collect();
                out.push_str(&escaped);
                rest = &rest[escaped.len()..];
                continue;
            }
            in_string = c != '"';
        } else if c == '"' {
            in_string = true;
        } else if let Some(token) = ["-Infinity", "Infinity", "NaN"]
            .into_iter()
            .find(|t| rest.starts_with(t))
        {
            out.push_str("null");
            rest = &rest[token.len()..];
            continue;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_program_reports_is_kept_and_nothing_else() {
        let m = Metrics::parse(
            r#"{"event": "progress", "step": 120, "total_steps": 1000, "loss": 0.41, "episode_return": 87.5, "phase": "rollout"}"#,
        )
        .unwrap();
        assert_eq!(m.step, 120);
        assert_eq!(m.total_steps, Some(1000));
        assert_eq!(m.loss, Some(0.41));
        assert_eq!(m.metrics.len(), 1, "a string is not a metric");
        assert_eq!(m.metrics["episode_return"], 87.5);
        assert!(!m.finished);

        let bare = Metrics::parse(r#"{"event":"progress","step":3}"#).unwrap();
        assert_eq!((bare.total_steps, bare.loss), (None, None));
        assert!(bare.metrics.is_empty());
        let json = serde_json::to_string(&bare).unwrap();
        assert_eq!(json, r#"{"step":3}"#, "absent stays absent");
    }

    #[test]
    fn python_non_finite_tokens_are_nan_not_a_log_line() {
        let m = Metrics::parse(r#"{"event": "finished", "step": 9, "loss": NaN, "note": "NaN inside", "x": -Infinity}"#)
            .unwrap();
        assert!(m.finished);
        assert!(m.loss.unwrap().is_nan());
        assert!(m.metrics["x"].is_nan());
        let back: Metrics = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert!(back.loss.unwrap().is_nan(), "a NaN loss survives storage");
    }

    #[test]
    fn anything_else_is_a_log_line() {
        for line in [
            "step 3 loss 0.2",
            r#"{"event": "progress"}"#,
            r#"{"event": "progress", "step": -1}"#,
            r#"{"event": "progress", "step": 1.5}"#,
            r#"{"event": "started", "step": 0}"#,
            r#"{"event": "progress", "step": 1, "loss": "low"}"#,
            r#"["event", "progress"]"#,
        ] {
            assert_eq!(Metrics::parse(line), None, "{line}");
        }
    }

    #[test]
    fn metrics_are_bounded() {
        let fields: Vec<String> = (0..200).map(|i| format!("\"m{i}\": {i}")).collect();
        let line = format!(
            "{{\"event\": \"progress\", \"step\": 1, {}, \"{}\": 1}}",
            fields.join(", "),
            "n".repeat(100)
        );
        let m = Metrics::parse(&line).unwrap();
        assert_eq!(m.metrics.len(), MAX_METRICS);
        assert!(m.metrics.keys().all(|k| k.len() <= MAX_METRIC_NAME));
    }
}
