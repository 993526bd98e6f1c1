//! The MLflow tracking server's REST API, as much of it as a training's run
//! needs: its experiment (found or made), the run, its params, metrics and
//! tags in batches, its end, and artifacts through the server's artifact
//! proxy (`mlflow server` serves `mlflow-artifacts:/` by default).

use crate::http::describe;
use serde_json::{json, Value};
use std::time::Duration;

/// How long one call may take: a tracker that is down costs the follower
/// this much at most, never a training anything.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// MLflow's limits per log-batch call.
pub const MAX_METRICS_PER_BATCH: usize = 1000;
pub const MAX_PARAMS_PER_BATCH: usize = 100;
/// MLflow's longest param value.
pub const MAX_PARAM_VALUE: usize = 6000;

/// One metric value at a step.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub key: String,
    pub value: f64,
    pub step: i64,
    /// Milliseconds since the epoch.
    pub timestamp_ms: i64,
}

/// A tracking server.
#[derive(Clone)]
pub struct Mlflow {
    base: String,
    client: reqwest::Client,
}

impl Mlflow {
    pub fn new(uri: &str) -> Self {
        Self {
            base: uri.trim_end_matches('/').to_string(),
            client: crate::http::client(CALL_TIMEOUT),
        }
    }

    pub fn uri(&self) -> &str {
        &self.base
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, String> {
        let url = format!("{}/api/2.0/mlflow/{path}", self.base);
        let mut request = self.client.request(method, &url);
        if let Some(body) = body {
            request = request
                .header("Content-Type", "application/json")
                .body(serde_json::to_vec(&body).unwrap_or_default());
        }
        let response = request.send().await.map_err(|e| describe(&e))?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| describe(&e))?;
        let text = String::from_utf8_lossy(&bytes).to_string();
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if status.is_success() {
            return Ok(value);
        }
        let code = value["error_code"].as_str().unwrap_or_default();
        let message = value["message"].as_str().unwrap_or(text.as_str());
        Err(format!("{path}: HTTP {} {code} {message}", status.as_u16()))
    }

    /// The id of experiment `name`, made when missing.
    pub async fn experiment(&self, name: &str) -> Result<String, String> {
        let path = format!("experiments/get-by-name?experiment_name={}", encode(name));
        match self.call(reqwest::Method::GET, &path, None).await {
            Ok(v) => id_at(&v, "/experiment/experiment_id"),
            Err(e) if e.contains("RESOURCE_DOES_NOT_EXIST") => {
                let made = self
                    .call(
                        reqwest::Method::POST,
                        "experiments/create",
                        Some(json!({ "name": name })),
                    )
                    .await;
                match made {
                    Ok(v) => id_at(&v, "/experiment_id"),
                    // Made meanwhile by another: found now.
                    Err(e) if e.contains("RESOURCE_ALREADY_EXISTS") => {
                        let v = self.call(reqwest::Method::GET, &path, None).await?;
                        id_at(&v, "/experiment/experiment_id")
                    }
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// A new run; returns its id and artifact URI.
    pub async fn create_run(
        &self,
        experiment_id: &str,
        name: &str,
        start_ms: i64,
        tags: &[(String, String)],
    ) -> Result<(String, String), String> {
        let tags: Vec<Value> = tags
            .iter()
            .map(|(k, v)| json!({"key": k, "value": v}))
            .collect();
        let v = self
            .call(
                reqwest::Method::POST,
                "runs/create",
                Some(json!({
                    "experiment_id": experiment_id,
                    "run_name": name,
                    "start_time": start_ms,
                    "tags": tags,
                })),
            )
            .await?;
        let run_id = id_at(&v, "/run/info/run_id")?;
        let artifacts = v
            .pointer("/run/info/artifact_uri")
            .and_then(Value::as_str)
            .unwrap_or_default();
        Ok((run_id, artifacts.to_string()))
    }

    /// Params, metrics and tags of a run, within MLflow's per-call limits
    /// (the caller splits).
    pub async fn log_batch(
        &self,
        run_id: &str,
        params: &[(String, String)],
        metrics: &[Point],
        tags: &[(String, String)],
    ) -> Result<(), String> {
        let params: Vec<Value> = params
            .iter()
            .map(|(k, v)| json!({"key": k, "value": v}))
            .collect();
        let tags: Vec<Value> = tags
            .iter()
            .map(|(k, v)| json!({"key": k, "value": v}))
            .collect();
        let metrics: Vec<Value> = metrics
            .iter()
            .map(|p| json!({"key": p.key, "value": p.value, "step": p.step, "timestamp": p.timestamp_ms}))
            .collect();
        self.call(
            reqwest::Method::POST,
            "runs/log-batch",
            Some(json!({"run_id": run_id, "params": params, "metrics": metrics, "tags": tags})),
        )
        .await
        .map(|_| ())
    }

    /// Ends a run: `FINISHED`, `FAILED` or `KILLED`.
    pub async fn end_run(&self, run_id: &str, status: &str, end_ms: i64) -> Result<(), String> {
        self.call(
            reqwest::Method::POST,
            "runs/update",
            Some(json!({"run_id": run_id, "status": status, "end_time": end_ms})),
        )
        .await
        .map(|_| ())
    }

    /// Uploads `bytes` as artifact `name` of a run whose artifact URI is
    /// the server's proxy (`mlflow-artifacts:/...`).
    pub async fn put_artifact(
        &self,
        artifact_uri: &str,
        name: &str,
        bytes: Vec<u8>,
    ) -> Result<(), String> {
        let Some(path) = artifact_uri.strip_prefix("mlflow-artifacts:") else {
            return Err(format!(
                "the run's artifacts go to {artifact_uri:?}, not the server's proxy: run `mlflow server` with --serve-artifacts"
            ));
        };
        let url = format!(
            "{}/api/2.0/mlflow-artifacts/artifacts/{}/{name}",
            self.base,
            path.trim_start_matches('/').trim_end_matches('/')
        );
        let response = self
            .client
            .put(&url)
            .body(bytes)
            .send()
            .await
            .map_err(|e| describe(&e))?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(format!(
                "artifact {name}: HTTP {}",
                response.status().as_u16()
            ))
        }
    }
}

fn id_at(v: &Value, pointer: &str) -> Result<String, String> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| format!("no {pointer} in the answer"))
}

/// A query value, percent-encoded.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_encoded() {
        assert_eq!(encode("vision team/1"), "vision%20team%2F1");
        assert_eq!(encode("a-b_c.d~"), "a-b_c.d~");
    }
}
