//! Every job's life under one policy, one JSON object per line
//! (`cohort-sim run --jobs-out DIR`): for comparing a simulation job by job
//! with another policy's, or with a real coordinator's (bench/fidelity).

use crate::engine::Run;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Serialize)]
struct JobLine<'a> {
    id: &'a str,
    team: &'a str,
    class: &'a str,
    gpus: u32,
    submit_s: f64,
    /// Virtual seconds; absent when it never started (or never ended).
    first_start_s: Option<f64>,
    end_s: Option<f64>,
    preemptions: u32,
    reclaims: u32,
    lost_gpu_s: f64,
    /// Elastic requests: its grows and shrinks, and the size it ended at.
    resizes: u32,
    last_size: u32,
    /// Its first start estimate: when it was made, and the estimate or why
    /// there was none.
    estimate_made_s: Option<f64>,
    estimated_start_s: Option<f64>,
    estimate_reason: Option<&'a str>,
    /// The estimates it carried later, while it waited: [made, estimate].
    later_estimates: &'a [(f64, f64)],
}

/// `DIR/<policy>.jsonl`, the policy's `:` written `+`.
pub fn path(dir: &Path, policy: &str) -> PathBuf {
    dir.join(format!("{}.jsonl", policy.replace(':', "+")))
}

pub fn write(file: &Path, run: &Run) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(file)?);
    for j in &run.jobs {
        let (made, estimate) = match &j.estimate {
            Some((made, e)) => (Some(*made), Some(e)),
            None => (None, None),
        };
        let line = JobLine {
            id: &j.trace.id,
            team: &j.trace.team,
            class: &j.trace.class,
            gpus: j.trace.gpus,
            submit_s: j.trace.submit_s,
            first_start_s: j.first_start,
            end_s: j.end,
            preemptions: j.preemptions,
            reclaims: j.reclaims,
            lost_gpu_s: j.lost_gpu_s,
            resizes: j.resizes,
            last_size: j.size,
            estimate_made_s: made,
            estimated_start_s: estimate.and_then(|e| e.as_ref().ok().copied()),
            estimate_reason: estimate.and_then(|e| e.as_ref().err().map(String::as_str)),
            later_estimates: &j.later,
        };
        serde_json::to_writer(&mut out, &line)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}
