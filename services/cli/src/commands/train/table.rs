//! `cohort train` tables: the list, one training in detail, its rank map and
//! state changes.

use crate::render::table::{dash, state_name, Table};
use crate::render::{float, short_name, time, until};
use cohort_proto::v1;
use std::fmt::Write as _;

fn progress_cells(p: Option<&v1::ProgressEvent>) -> (String, String) {
    match p {
        Some(p) => (format!("{}/{}", p.step, p.total_steps), float(p.loss)),
        None => ("-".to_string(), "-".to_string()),
    }
}

pub fn trainings(trainings: &[v1::Training]) -> String {
    if trainings.is_empty() {
        return "no trainings".to_string();
    }
    let mut t = Table::new(&[
        "ID", "NAME", "STATE", "CLASS", "RANKS", "STEP", "LOSS", "CREATED", "ESTIMATE", "REASON",
    ]);
    let now = std::time::SystemTime::now();
    for tr in trainings {
        let (step, loss) = match &tr.latest_program_progress {
            Some(p) => crate::render::program::cells(p),
            None => progress_cells(tr.latest_progress.as_ref()),
        };
        t.row(vec![
            tr.id.clone(),
            dash(&tr.display_name),
            state_cell(tr),
            dash(&tr.priority_class),
            tr.world_size.to_string(),
            step,
            loss,
            time(tr.create_time.as_ref()),
            estimate_cell(tr, now),
            dash(&tr.state_reason),
        ]);
    }
    t.render()
}

/// The state, `RUNNING (borrowing)` when it runs on borrowed quota.
fn state_cell(t: &v1::Training) -> String {
    if t.borrowing {
        format!("{} (borrowing)", state_name(t.state))
    } else {
        state_name(t.state)
    }
}

/// When a waiting training starts (`starts in 12m`) or a running one ends
/// (`ends in 3h 05m`); `?` when nobody can say (the detail says why).
fn estimate_cell(t: &v1::Training, now: std::time::SystemTime) -> String {
    use v1::training::State;
    let (what, at) = match t.state() {
        State::Queued | State::Restarting => ("starts", t.estimated_start_time.as_ref()),
        State::Scheduled | State::Running => ("ends", t.estimated_end_time.as_ref()),
        _ => return "-".to_string(),
    };
    match at {
        Some(at) => format!("{what} {}", until(Some(at), now)),
        None if t.estimate_reason.is_empty() => "-".to_string(),
        None => "?".to_string(),
    }
}

/// One training in detail: its fields, its rank map and (when given) its
/// state transitions.
pub fn training_detail(t: &v1::Training, transitions: Option<&[v1::TrainingEvent]>) -> String {
    let mut out = String::new();
    let fields = [
        state_fields(t),
        scheduling_fields(t),
        progress_fields(t),
        record_fields(t),
    ];
    for (name, value) in fields.into_iter().flatten() {
        let _ = writeln!(out, "{:<14}{value}", format!("{name}:"));
    }
    if !t.ranks.is_empty() {
        out.push('\n');
        out.push_str(&ranks(&t.ranks));
        out.push('\n');
    }
    if let Some(events) = transitions {
        out.push('\n');
        out.push_str(&state_changes(events));
        out.push('\n');
    }
    out.trim_end().to_string()
}

type Fields = Vec<(&'static str, String)>;

/// Which training, its state and when it is expected to start or end.
fn state_fields(t: &v1::Training) -> Fields {
    let mut f: Fields = vec![("id", t.id.clone())];
    if !t.display_name.is_empty() {
        f.push(("name", t.display_name.clone()));
    }
    f.push(("state", state_cell(t)));
    if !t.state_reason.is_empty() {
        f.push(("reason", t.state_reason.clone()));
    }
    let now = std::time::SystemTime::now();
    if let Some(at) = &t.estimated_start_time {
        f.push((
            "starts",
            format!("{} ({})", time(Some(at)), until(Some(at), now)),
        ));
    }
    if let Some(at) = &t.estimated_end_time {
        f.push((
            "ends",
            format!("{} ({})", time(Some(at)), until(Some(at), now)),
        ));
    }
    if !t.estimate_reason.is_empty() {
        f.push(("estimate", t.estimate_reason.clone()));
    }
    f
}

/// Its size, attempts, priority, sharing, labels, GPUs and config.
fn scheduling_fields(t: &v1::Training) -> Fields {
    let mut f: Fields = vec![
        ("world size", t.world_size.to_string()),
        (
            "attempt",
            format!(
                "{} (restarts {}/{})",
                t.attempt, t.restart_count, t.max_restarts
            ),
        ),
        (
            "priority",
            if t.priority_class.is_empty() {
                t.priority.to_string()
            } else {
                format!("{} ({})", t.priority_class, t.priority)
            },
        ),
        (
            "sharing",
            format!(
                "preempted {} time(s){}{}{}",
                t.preemption_count,
                if t.resize_count > 0 {
                    format!(", resized {} time(s)", t.resize_count)
                } else {
                    String::new()
                },
                if t.borrow { "" } else { ", never borrows" },
                if t.borrowing { ", borrowing now" } else { "" }
            ),
        ),
    ];
    if !t.labels.is_empty() {
        let mut labels: Vec<String> = t.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        labels.sort();
        f.push(("labels", labels.join(" ")));
    }
    if let Some(r) = &t.gpu_request {
        f.push(("gpus", gpu_request(r)));
    }
    if let Some(c) = &t.config {
        f.push(("config", config_summary(c)));
        if let Some(code) = c.program.as_ref().and_then(|p| p.code.as_ref()) {
            f.push(("code", crate::render::program::code_text(code)));
        }
    }
    if let Some(tr) = &t.tracking {
        f.push(("mlflow", tracking_text(tr)));
    }
    f
}

/// `run 4f1c... at http://mlflow:5000 (120 points, 0 dropped)`, and what
/// went wrong last.
fn tracking_text(t: &v1::TrackingStatus) -> String {
    let run = if t.run_id.is_empty() {
        "no run yet".to_string()
    } else {
        format!("run {}", t.run_id)
    };
    let mut text = format!(
        "{run} at {} ({} points, {} dropped, {} pending{})",
        t.uri,
        t.points_logged,
        t.points_dropped,
        t.points_pending,
        if t.ended { ", ended" } else { "" }
    );
    if !t.last_error.is_empty() {
        text.push_str(&format!("; last error: {}", t.last_error));
    }
    text
}

/// Its latest progress: a program's, or the SAE's with its quality and numerics.
fn progress_fields(t: &v1::Training) -> Fields {
    let mut f = Fields::new();
    if let Some(p) = &t.latest_program_progress {
        f.push(("progress", crate::render::program::progress_text(p)));
    }
    if let Some(p) = &t.latest_progress {
        f.push((
            "progress",
            format!(
                "step {}/{}  loss {}  {:.0} samples/s",
                p.step,
                p.total_steps,
                float(p.loss),
                p.samples_per_sec
            ),
        ));
        f.push(("quality", crate::render::progress::sae_metrics(p)));
        f.push((
            "numerics",
            format!(
                "grad norm {}  non-finite steps {}  loss scale {}",
                float(p.grad_norm),
                p.nonfinite_steps,
                float(p.loss_scale)
            ),
        ));
    }
    f
}

/// Its request id and times.
fn record_fields(t: &v1::Training) -> Fields {
    let mut f = Fields::new();
    if !t.request_id.is_empty() {
        f.push(("request id", t.request_id.clone()));
    }
    f.push(("created", time(t.create_time.as_ref())));
    f.push(("started", time(t.start_time.as_ref())));
    f.push(("ended", time(t.end_time.as_ref())));
    f
}

/// A GPU request in words, e.g. `2 GPUs, queue when busy`.
pub fn gpu_request(r: &v1::GpuRequest) -> String {
    use v1::gpu_request::Selection;
    let what = match &r.selection {
        Some(Selection::GpuIds(ids)) => ids.ids.join(", "),
        Some(Selection::Count(1)) => "1 GPU".to_string(),
        Some(Selection::Count(n)) => format!("{n} GPUs"),
        Some(Selection::Auto(a)) if a.max_gpus > 0 => format!("auto, at most {}", a.max_gpus),
        None if r.min_count.is_some() => format!(
            "{}..{} GPUs, elastic",
            r.min_count.unwrap_or(1),
            r.max_count.unwrap_or(1)
        ),
        _ => "auto".to_string(),
    };
    let queue = if r.queue == Some(false) {
        "fail when busy"
    } else {
        "queue when busy"
    };
    format!("{what} ({queue})")
}

/// The main facts of a config on one line.
pub fn config_summary(c: &v1::TrainingConfig) -> String {
    use v1::data_config::Source;
    if let Some(p) = &c.program {
        return crate::render::program::config_summary(p);
    }
    let mut parts = Vec::new();
    if let Some(m) = &c.model {
        let width = match (m.d_sae, m.expansion_factor) {
            (Some(d), _) => format!("d_sae {d}"),
            (None, Some(f)) => format!("d_sae {}", m.d_in.saturating_mul(f)),
            (None, None) => "d_sae ?".to_string(),
        };
        let activation = match v1::Architecture::try_from(m.architecture) {
            Ok(v1::Architecture::Topk) => format!(", topk k {}", m.k.unwrap_or_default()),
            _ => String::new(),
        };
        parts.push(format!("SAE d_in {}, {width}{activation}", m.d_in));
    }
    if let Some(o) = &c.optim {
        match o.global_batch {
            // Each size derives its own micro-batch, at most batch_size.
            Some(global) => parts.push(format!(
                "global batch {global}, micro-batch <= {}",
                o.batch_size
            )),
            None => parts.push(format!("batch {}/rank", o.batch_size)),
        }
        match (o.steps, o.epochs) {
            (Some(s), _) => parts.push(format!("{s} steps")),
            (None, Some(e)) => parts.push(format!("{e} epochs")),
            (None, None) => {}
        }
    }
    match c.data.as_ref().and_then(|d| d.source.as_ref()) {
        Some(Source::Synthetic(s)) => {
            parts.push(format!("synthetic data, {} samples", s.num_samples))
        }
        Some(Source::Files(f)) => parts.push(format!("{} data files", f.paths.len())),
        // A data source newer than this CLI.
        #[allow(unreachable_patterns)]
        _ => {}
    }
    parts.join(", ")
}

pub fn ranks(ranks: &[v1::RankAssignment]) -> String {
    let mut t = Table::new(&[
        "RANK", "LOCAL", "HOST", "AGENT", "GPU", "UUID", "STATE", "PID", "EXIT",
    ]);
    for r in ranks {
        let state = v1::RankState::try_from(r.state)
            .map(|s| short_name(s.as_str_name(), "RANK_STATE_"))
            .unwrap_or_else(|_| r.state.to_string());
        let exit = match (r.exit_code, r.signal) {
            (Some(code), _) => format!("code {code}"),
            (None, Some(sig)) => format!("signal {sig}"),
            (None, None) => "-".to_string(),
        };
        t.row(vec![
            r.rank.to_string(),
            format!("{}/{}", r.local_rank, r.local_world_size),
            dash(&r.host_name),
            dash(&r.agent_id),
            r.gpu_index.to_string(),
            dash(&r.gpu_uuid),
            state,
            if r.pid == 0 {
                "-".to_string()
            } else {
                r.pid.to_string()
            },
            exit,
        ]);
    }
    t.render()
}

/// The state changes among `events`, oldest first.
pub fn state_changes(events: &[v1::TrainingEvent]) -> String {
    use v1::training_event::Event;
    let mut t = Table::new(&["TIME", "FROM", "TO", "REASON"]);
    for e in events {
        if let Some(Event::StateChange(s)) = &e.event {
            let from = if s.from == 0 {
                "-".to_string()
            } else {
                state_name(s.from)
            };
            t.row(vec![
                time(e.time.as_ref()),
                from,
                state_name(s.to),
                dash(&s.reason),
            ]);
        }
    }
    if t.is_empty() {
        "no state transitions recorded".to_string()
    } else {
        t.render()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_trainings_says_so() {
        assert_eq!(trainings(&[]), "no trainings");
    }

    #[test]
    fn training_detail_shows_ranks_and_transitions() {
        let t = v1::Training {
            id: "t-1".into(),
            state: v1::training::State::Queued as i32,
            state_reason: "waiting for 4 GPUs, 2 free".into(),
            ranks: vec![v1::RankAssignment {
                rank: 0,
                local_world_size: 1,
                host_name: "node1".into(),
                gpu_uuid: "SIM-0".into(),
                exit_code: Some(0),
                ..Default::default()
            }],
            ..Default::default()
        };
        let events = vec![v1::TrainingEvent {
            sequence: 1,
            event: Some(v1::training_event::Event::StateChange(v1::StateChange {
                from: 0,
                to: v1::training::State::Queued as i32,
                reason: "created".into(),
                ..Default::default()
            })),
            ..Default::default()
        }];
        let spec = cohort_spec::TrainingConfig::from_toml(
            "[model]\nd_in = 8\nexpansion_factor = 4\n[optim]\nbatch_size = 4\nsteps = 10\n\
             [data.synthetic]\nnum_samples = 64\n",
        )
        .unwrap();
        let t = v1::Training {
            config: Some(v1::TrainingConfig::from(&spec)),
            gpu_request: Some(v1::GpuRequest {
                selection: Some(v1::gpu_request::Selection::Count(4)),
                queue: None,
                ..Default::default()
            }),
            ..t
        };
        let text = training_detail(&t, Some(&events));
        assert!(
            text.contains("gpus:         4 GPUs (queue when busy)"),
            "{text}"
        );
        assert!(
            text.contains(
                "config:       SAE d_in 8, d_sae 32, batch 4/rank, 10 steps, \
                 synthetic data, 64 samples"
            ),
            "{text}"
        );
        assert!(text.contains("state:        QUEUED"), "{text}");
        assert!(
            text.contains("sharing:      preempted 0 time(s), never borrows"),
            "{text}"
        );
        assert!(text.contains("reason:       waiting for 4 GPUs, 2 free"));
        assert!(text.contains("RANK  LOCAL  HOST"));
        assert!(text.contains("code 0"));
        assert!(text.contains("-     -     QUEUED  created"), "{text}");
    }
}
