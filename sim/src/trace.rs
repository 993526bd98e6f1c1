//! A job trace (docs/scheduling.md#traces): one job per line, JSON lines
//! (`.jsonl`) or CSV with a header (`.csv`). A bad line is refused with its
//! line number and field; nothing of a bad trace is simulated.

use cohort_coordinator::policy::PriorityClasses;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::Path;

/// One job of a trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceJob {
    /// Unique within the trace.
    pub id: String,
    /// When it is submitted, seconds from the trace's start.
    pub submit_s: f64,
    pub team: String,
    /// GPUs of its gang, 1..=4096: the size its duration is for.
    pub gpus: u32,
    /// The smallest size it may run at when requests are elastic (a policy
    /// with `:elastic`), 1..=gpus; absent: half of `gpus`, rounded up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_gpus: Option<u32>,
    /// How long it runs on its GPUs without interruption, seconds.
    pub duration_s: f64,
    /// Its priority class (the coordinator's defaults: low, normal, high, urgent).
    #[serde(default = "normal")]
    pub class: String,
    /// Seconds of running between its periodic checkpoints.
    #[serde(default = "hour")]
    pub checkpoint_every_s: f64,
    /// What the submitter said it runs (`runtime.expected_duration`), if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_duration_s: Option<f64>,
    /// It checkpoints on a notice (the built-in SAE; a program using
    /// cohort_train.should_stop); else it is killed at its grace and
    /// loses the work since its last checkpoint.
    #[serde(default = "yes")]
    pub saves_on_notice: bool,
}

fn normal() -> String {
    "normal".into()
}

fn hour() -> f64 {
    3600.0
}

fn yes() -> bool {
    true
}

/// Why a trace cannot be read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TraceError {
    #[error("{path}: {reason}")]
    File { path: String, reason: String },
    #[error("line {line}: {field}: {reason}")]
    Line {
        line: usize,
        field: String,
        reason: String,
    },
}

/// The CSV header (and column order).
pub const CSV_HEADER: &str =
    "id,submit_s,team,gpus,duration_s,class,checkpoint_every_s,expected_duration_s,saves_on_notice,min_gpus";

fn bad(line: usize, field: &str, reason: impl Into<String>) -> TraceError {
    TraceError::Line {
        line,
        field: field.to_string(),
        reason: reason.into(),
    }
}

impl TraceJob {
    /// Checks every field's value; `line` names it in the error.
    fn check(&self, line: usize) -> Result<(), TraceError> {
        if self.id.is_empty() || self.id.len() > 128 {
            return Err(bad(line, "id", "1 to 128 characters"));
        }
        if !(self.submit_s.is_finite() && self.submit_s >= 0.0) {
            return Err(bad(line, "submit_s", "a time >= 0"));
        }
        if self.team.is_empty() || self.team.len() > 63 {
            return Err(bad(line, "team", "1 to 63 characters"));
        }
        if !(1..=4096).contains(&self.gpus) {
            return Err(bad(line, "gpus", "1 to 4096"));
        }
        if self.min_gpus.is_some_and(|m| !(1..=self.gpus).contains(&m)) {
            return Err(bad(line, "min_gpus", "1 to gpus (or absent)"));
        }
        let classes = PriorityClasses::default();
        if classes.get(&self.class).is_none() {
            return Err(bad(
                line,
                "class",
                format!("{:?} is not a class: {}", self.class, classes.names()),
            ));
        }
        if !(self.duration_s.is_finite() && self.duration_s > 0.0) {
            return Err(bad(line, "duration_s", "a duration > 0"));
        }
        if !(self.checkpoint_every_s.is_finite() && self.checkpoint_every_s > 0.0) {
            return Err(bad(line, "checkpoint_every_s", "a duration > 0"));
        }
        if self
            .expected_duration_s
            .is_some_and(|e| !(e.is_finite() && e > 0.0))
        {
            return Err(bad(
                line,
                "expected_duration_s",
                "a duration > 0 (or absent)",
            ));
        }
        Ok(())
    }
}

/// Reads `path`: JSON lines, or CSV when it ends in `.csv`.
pub fn read(path: &Path) -> Result<Vec<TraceJob>, TraceError> {
    let text = std::fs::read_to_string(path).map_err(|e| TraceError::File {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    let csv = path.extension().is_some_and(|e| e == "csv");
    let jobs = if csv {
        parse_csv(&text)?
    } else {
        parse_jsonl(&text)?
    };
    Ok(jobs)
}

/// JSON lines; blank lines and `#` comments are skipped.
pub fn parse_jsonl(text: &str) -> Result<Vec<TraceJob>, TraceError> {
    let mut jobs = Vec::new();
    let mut seen = HashSet::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let job: TraceJob = serde_json::from_str(line).map_err(|e| {
            let message = e.to_string();
            let field = message.split('`').nth(1).unwrap_or("line").to_string();
            bad(line_no, &field, message)
        })?;
        job.check(line_no)?;
        if !seen.insert(job.id.clone()) {
            return Err(bad(line_no, "id", format!("{} appears twice", job.id)));
        }
        jobs.push(job);
    }
    Ok(jobs)
}

/// CSV with [`CSV_HEADER`]'s columns (the last five may be empty).
pub fn parse_csv(text: &str) -> Result<Vec<TraceJob>, TraceError> {
    let mut lines = text.lines().enumerate();
    let header: Vec<&str> = match lines.next() {
        Some((_, h)) => h.split(',').map(str::trim).collect(),
        None => return Ok(Vec::new()),
    };
    let columns: Vec<&str> = CSV_HEADER.split(',').collect();
    for (i, name) in columns.iter().enumerate().take(5) {
        if header.get(i) != Some(name) {
            return Err(bad(
                1,
                name,
                format!("the header must start {}", CSV_HEADER),
            ));
        }
    }
    let mut jobs = Vec::new();
    let mut seen = HashSet::new();
    for (i, line) in lines {
        let line_no = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        let cell = |k: usize| cells.get(k).copied().unwrap_or("");
        let number = |k: usize| -> Result<f64, TraceError> {
            cell(k).parse::<f64>().map_err(|_| {
                bad(
                    line_no,
                    columns[k],
                    format!("{:?} is not a number", cell(k)),
                )
            })
        };
        let optional = |k: usize| -> Result<Option<f64>, TraceError> {
            if cell(k).is_empty() {
                Ok(None)
            } else {
                number(k).map(Some)
            }
        };
        let job = TraceJob {
            id: cell(0).to_string(),
            submit_s: number(1)?,
            team: cell(2).to_string(),
            gpus: cell(3).parse().map_err(|_| {
                bad(
                    line_no,
                    "gpus",
                    format!("{:?} is not a whole number", cell(3)),
                )
            })?,
            duration_s: number(4)?,
            class: Some(cell(5))
                .filter(|c| !c.is_empty())
                .unwrap_or("normal")
                .to_string(),
            checkpoint_every_s: optional(6)?.unwrap_or(3600.0),
            expected_duration_s: optional(7)?,
            saves_on_notice: match cell(8) {
                "" | "true" | "1" => true,
                "false" | "0" => false,
                other => {
                    return Err(bad(
                        line_no,
                        "saves_on_notice",
                        format!("{other:?}: true or false"),
                    ))
                }
            },
            min_gpus: match cell(9) {
                "" => None,
                m => Some(m.parse().map_err(|_| {
                    bad(line_no, "min_gpus", format!("{m:?} is not a whole number"))
                })?),
            },
        };
        job.check(line_no)?;
        if !seen.insert(job.id.clone()) {
            return Err(bad(line_no, "id", format!("{} appears twice", job.id)));
        }
        jobs.push(job);
    }
    Ok(jobs)
}

/// Writes `jobs` to `path`: CSV when it ends in `.csv`, else JSON lines.
pub fn write(path: &Path, jobs: &[TraceJob]) -> std::io::Result<()> {
    let mut out = String::new();
    if path.extension().is_some_and(|e| e == "csv") {
        out.push_str(CSV_HEADER);
        out.push('\n');
        for j in jobs {
            out.push_str(&format!(
                "{},{},{},{},{},{},{},{},{},{}\n",
                j.id,
                j.submit_s,
                j.team,
                j.gpus,
                j.duration_s,
                j.class,
                j.checkpoint_every_s,
                j.expected_duration_s
                    .map(|e| e.to_string())
                    .unwrap_or_default(),
                j.saves_on_notice,
                j.min_gpus.map(|m| m.to_string()).unwrap_or_default()
            ));
        }
    } else {
        for j in jobs {
            out.push_str(&serde_json::to_string(j).expect("a trace job serialises"));
            out.push('\n');
        }
    }
    std::fs::write(path, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonl_and_csv_read_the_same_job() {
        let json = r#"{"id":"j1","submit_s":10,"team":"a","gpus":8,"duration_s":3600,"class":"urgent","checkpoint_every_s":600,"expected_duration_s":4000,"saves_on_notice":false}"#;
        let a = parse_jsonl(json).unwrap();
        let csv = format!("{CSV_HEADER}\nj1,10,a,8,3600,urgent,600,4000,false\n");
        let b = parse_csv(&csv).unwrap();
        assert_eq!(a, b);
        // An elastic job's smallest size, in either form; never above gpus.
        let e = parse_jsonl(
            r#"{"id":"e","submit_s":0,"team":"a","gpus":8,"duration_s":60,"min_gpus":2}"#,
        )
        .unwrap();
        let f = parse_csv(&format!("{CSV_HEADER}\ne,0,a,8,60,,,,,2\n")).unwrap();
        assert_eq!((e[0].min_gpus, f[0].min_gpus), (Some(2), Some(2)));
        assert_eq!(e, f);
        let over = parse_jsonl(
            r#"{"id":"e","submit_s":0,"team":"a","gpus":2,"duration_s":60,"min_gpus":4}"#,
        );
        assert_eq!(
            over.unwrap_err().to_string(),
            "line 1: min_gpus: 1 to gpus (or absent)"
        );
        // Defaults.
        let c =
            parse_jsonl(r#"{"id":"j2","submit_s":0,"team":"a","gpus":1,"duration_s":60}"#).unwrap();
        assert_eq!(c[0].class, "normal");
        assert!(c[0].saves_on_notice && c[0].expected_duration_s.is_none());
    }

    #[test]
    fn a_bad_line_is_named_by_its_number_and_field() {
        let text = "\n# comment\n{\"id\":\"j1\",\"submit_s\":0,\"team\":\"a\",\"gpus\":0,\"duration_s\":60}\n";
        assert_eq!(
            parse_jsonl(text).unwrap_err().to_string(),
            "line 3: gpus: 1 to 4096"
        );
        let unknown =
            "{\"id\":\"j1\",\"submit_s\":0,\"team\":\"a\",\"gpus\":1,\"duration_s\":60,\"prio\":1}";
        let err = parse_jsonl(unknown).unwrap_err().to_string();
        assert!(err.starts_with("line 1: prio: unknown field"), "{err}");
        let csv = format!("{CSV_HEADER}\nj1,0,a,2,soon,,,,\n");
        assert_eq!(
            parse_csv(&csv).unwrap_err().to_string(),
            "line 2: duration_s: \"soon\" is not a number"
        );
        let class = "{\"id\":\"j1\",\"submit_s\":0,\"team\":\"a\",\"gpus\":1,\"duration_s\":60,\"class\":\"asap\"}";
        assert_eq!(
            parse_jsonl(class).unwrap_err().to_string(),
            "line 1: class: \"asap\" is not a class: low, normal, high, urgent"
        );
        let twice = "# two\n{\"id\":\"j1\",\"submit_s\":0,\"team\":\"a\",\"gpus\":1,\"duration_s\":60}\n\n{\"id\":\"j1\",\"submit_s\":1,\"team\":\"a\",\"gpus\":1,\"duration_s\":60}\n";
        assert_eq!(
            parse_jsonl(twice).unwrap_err().to_string(),
            "line 4: id: j1 appears twice"
        );
    }

    #[test]
    fn a_trace_written_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = parse_jsonl(r#"{"id":"j1","submit_s":1.5,"team":"a","gpus":4,"duration_s":60,"expected_duration_s":70}"#).unwrap();
        for name in ["t.jsonl", "t.csv"] {
            let path = dir.path().join(name);
            write(&path, &jobs).unwrap();
            assert_eq!(read(&path).unwrap(), jobs, "{name}");
        }
    }
}
