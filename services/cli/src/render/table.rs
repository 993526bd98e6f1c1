//! Aligned plain-text tables of the `cohort.v1` messages, for people.

use super::{bytes, float, gib, opt_num, short_name, time};
use cohort_proto::v1;
use std::fmt::Write;

/// Left-aligned columns separated by two spaces, a header row first.
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&'static str]) -> Self {
        Self {
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                if let Some(w) = widths.get_mut(i) {
                    *w = (*w).max(cell.chars().count());
                }
            }
        }
        let mut out = String::new();
        let header: Vec<String> = self.headers.iter().map(|h| h.to_string()).collect();
        for row in std::iter::once(&header).chain(self.rows.iter()) {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                let width = widths.get(i).copied().unwrap_or(0);
                let pad = width.saturating_sub(cell.chars().count());
                line.push_str(cell);
                line.push_str(&" ".repeat(pad + 2));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out.pop();
        out
    }
}

/// A training state's name, e.g. `RUNNING` (the number if unknown).
pub fn state_name(raw: i32) -> String {
    v1::training::State::try_from(raw)
        .map(|s| s.as_str_name().to_string())
        .unwrap_or_else(|_| raw.to_string())
}

fn dash(s: &str) -> String {
    if s.is_empty() {
        "-".to_string()
    } else {
        s.to_string()
    }
}

pub fn gpus(gpus: &[v1::Gpu]) -> String {
    if gpus.is_empty() {
        return "no GPUs (is an agent connected? see `cohort agents`)".to_string();
    }
    let mut t = Table::new(&[
        "AGENT",
        "IDX",
        "UUID",
        "NAME",
        "MEMORY GiB",
        "UTIL",
        "TEMP",
        "STATE",
        "JOB",
        "HEALTH",
    ]);
    let mut any_simulated = false;
    for g in gpus {
        let info = g.info.clone().unwrap_or_default();
        let sample = g.latest_sample.as_ref();
        let total = sample
            .map(|s| s.memory_total_bytes)
            .filter(|&b| b > 0)
            .unwrap_or(info.memory_total_bytes);
        let memory = match sample {
            Some(s) => format!("{}/{}", gib(s.memory_used_bytes), gib(total)),
            None => format!("-/{}", gib(total)),
        };
        let job = if g.training_id.is_empty() {
            "-".to_string()
        } else {
            format!("{} (rank {})", g.training_id, g.rank)
        };
        let health = if g.health_notes.is_empty() {
            "ok".to_string()
        } else {
            g.health_notes.join(", ")
        };
        let name = if info.simulated {
            any_simulated = true;
            format!("{} *", info.name)
        } else {
            info.name.clone()
        };
        t.row(vec![
            dash(&g.agent_name),
            info.index.to_string(),
            dash(&info.uuid),
            name,
            memory,
            opt_num(sample.and_then(|s| s.utilization_gpu_percent), 0, "%"),
            opt_num(sample.and_then(|s| s.temperature_celsius), 0, "C"),
            availability(g.availability),
            job,
            health,
        ]);
    }
    let mut out = t.render();
    if any_simulated {
        out.push_str("\n* simulated GPU: no real device, synthetic samples");
    }
    out
}

fn availability(raw: i32) -> String {
    v1::GpuAvailability::try_from(raw)
        .map(|a| short_name(a.as_str_name(), "GPU_AVAILABILITY_"))
        .unwrap_or_else(|_| raw.to_string())
}

pub fn agents(agents: &[v1::Agent]) -> String {
    if agents.is_empty() {
        return "no agents".to_string();
    }
    let now = std::time::SystemTime::now();
    let mut t = Table::new(&[
        "NAME",
        "ID",
        "HOST",
        "STATE",
        "GPUS",
        "VERSION",
        "CONNECTED",
        "LAST SEEN",
    ]);
    for a in agents {
        let simulated = a.gpus.iter().filter(|g| g.simulated).count();
        let gpus = if simulated > 0 {
            format!("{} ({simulated} simulated)", a.gpus.len())
        } else {
            a.gpus.len().to_string()
        };
        let state = v1::AgentState::try_from(a.state)
            .map(|s| short_name(s.as_str_name(), "AGENT_STATE_"))
            .unwrap_or_else(|_| a.state.to_string());
        t.row(vec![
            dash(&a.name),
            dash(&a.id),
            dash(&a.host_name),
            state,
            gpus,
            dash(&a.version),
            time(a.connect_time.as_ref()),
            super::ago(a.last_seen_time.as_ref(), now),
        ]);
    }
    t.render()
}

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
        "ID", "NAME", "STATE", "RANKS", "STEP", "LOSS", "CREATED", "REASON",
    ]);
    for tr in trainings {
        let (step, loss) = progress_cells(tr.latest_progress.as_ref());
        t.row(vec![
            tr.id.clone(),
            dash(&tr.display_name),
            state_name(tr.state),
            tr.world_size.to_string(),
            step,
            loss,
            time(tr.create_time.as_ref()),
            dash(&tr.state_reason),
        ]);
    }
    t.render()
}

/// One training in detail: its fields, its rank map and (when given) its
/// state transitions.
pub fn training_detail(t: &v1::Training, transitions: Option<&[v1::TrainingEvent]>) -> String {
    let mut out = String::new();
    let mut field = |name: &str, value: String| {
        let _ = writeln!(out, "{:<14}{value}", format!("{name}:"));
    };
    field("id", t.id.clone());
    if !t.display_name.is_empty() {
        field("name", t.display_name.clone());
    }
    field("state", state_name(t.state));
    if !t.state_reason.is_empty() {
        field("reason", t.state_reason.clone());
    }
    field("world size", t.world_size.to_string());
    field(
        "attempt",
        format!(
            "{} (restarts {}/{})",
            t.attempt, t.restart_count, t.max_restarts
        ),
    );
    field("priority", t.priority.to_string());
    if let Some(r) = &t.gpu_request {
        field("gpus", gpu_request(r));
    }
    if let Some(c) = &t.config {
        field("config", config_summary(c));
    }
    if let Some(p) = &t.latest_progress {
        field(
            "progress",
            format!(
                "step {}/{}  loss {}  {:.0} samples/s",
                p.step,
                p.total_steps,
                float(p.loss),
                p.samples_per_sec
            ),
        );
    }
    if !t.request_id.is_empty() {
        field("request id", t.request_id.clone());
    }
    field("created", time(t.create_time.as_ref()));
    field("started", time(t.start_time.as_ref()));
    field("ended", time(t.end_time.as_ref()));
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

/// A GPU request in words, e.g. `2 GPUs, queue when busy`.
pub fn gpu_request(r: &v1::GpuRequest) -> String {
    use v1::gpu_request::Selection;
    let what = match &r.selection {
        Some(Selection::GpuIds(ids)) => ids.ids.join(", "),
        Some(Selection::Count(1)) => "1 GPU".to_string(),
        Some(Selection::Count(n)) => format!("{n} GPUs"),
        Some(Selection::Auto(a)) if a.max_gpus > 0 => format!("auto, at most {}", a.max_gpus),
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
    let mut parts = Vec::new();
    if let Some(m) = &c.model {
        let width = match (m.d_sae, m.expansion_factor) {
            (Some(d), _) => format!("d_sae {d}"),
            (None, Some(f)) => format!("d_sae {}", m.d_in.saturating_mul(f)),
            (None, None) => "d_sae ?".to_string(),
        };
        parts.push(format!("SAE d_in {}, {width}", m.d_in));
    }
    if let Some(o) = &c.optim {
        parts.push(format!("batch {}/rank", o.batch_size));
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

pub fn checkpoints(checkpoints: &[v1::Checkpoint]) -> String {
    if checkpoints.is_empty() {
        return "no checkpoints".to_string();
    }
    let mut t = Table::new(&["STEP", "ATTEMPT", "AGENT", "PATH", "CREATED"]);
    for c in checkpoints {
        t.row(vec![
            c.step.to_string(),
            c.attempt.to_string(),
            dash(&c.agent_id),
            dash(&c.path),
            time(c.create_time.as_ref()),
        ]);
    }
    t.render()
}

/// A memory estimate, by component.
pub fn memory_estimate(e: &v1::MemoryEstimate) -> String {
    let mut t = Table::new(&["COMPONENT", "MEMORY"]);
    for (name, n) in [
        ("parameters", e.parameters_bytes),
        ("gradients", e.gradients_bytes),
        ("optimizer state", e.optimizer_bytes),
        ("activations", e.activations_bytes),
        ("data", e.data_bytes),
        ("overhead", e.overhead_bytes),
        ("total per GPU", e.total_bytes),
    ] {
        t.row(vec![name.to_string(), bytes(n)]);
    }
    format!("{} trainable parameters\n{}", e.parameter_count, t.render())
}

pub fn recommendation(r: &v1::RecommendGpusResponse) -> String {
    let mut out = String::new();
    if let Some(e) = &r.estimate {
        let _ = writeln!(out, "each GPU needs {} free", bytes(e.total_bytes));
    }
    if r.gpus.is_empty() {
        out.push_str("no suitable GPUs");
    } else {
        out.push_str(&gpus(&r.gpus));
    }
    if !r.shortfall_reason.is_empty() {
        let _ = write!(out, "\nfewer than asked: {}", r.shortfall_reason);
    }
    out
}

pub fn validation(r: &v1::ValidateGpuSelectionResponse) -> String {
    let mut out = String::new();
    if let Some(e) = &r.estimate {
        let _ = writeln!(out, "each GPU needs {} free", bytes(e.total_bytes));
    }
    if r.valid {
        out.push_str("valid: the training could run on these GPUs now");
        return out;
    }
    let mut t = Table::new(&["GPU", "PROBLEM", "DETAILS"]);
    for p in &r.problems {
        t.row(vec![p.gpu_id.clone(), p.reason.clone(), p.message.clone()]);
    }
    out.push_str("not valid:\n");
    out.push_str(&t.render());
    out
}

const AGGREGATE_HEADERS: [&str; 8] = [
    "GPUS",
    "BUSY",
    "SIMULATED",
    "UTIL",
    "MEM UTIL",
    "MEMORY GiB",
    "MAX TEMP",
    "POWER",
];

fn aggregate_row(a: &v1::AggregatedGpuMetrics) -> Vec<String> {
    vec![
        a.gpu_count.to_string(),
        a.busy_count.to_string(),
        a.simulated_count.to_string(),
        format!("{:.0}%", a.mean_utilization_gpu_percent),
        format!("{:.0}%", a.mean_utilization_memory_percent),
        format!("{}/{}", gib(a.memory_used_bytes), gib(a.memory_total_bytes)),
        format!("{:.0}C", a.max_temperature_celsius),
        format!("{:.0}W", a.power_draw_watts),
    ]
}

const GPU_METRICS_HEADERS: [&str; 11] = [
    "AGENT",
    "IDX",
    "UUID",
    "UTIL",
    "MEM UTIL",
    "MEMORY GiB",
    "TEMP",
    "POWER",
    "SM MHz",
    "JOB",
    "THROTTLE",
];

fn gpu_metrics_row(m: &v1::GpuMetrics) -> Vec<String> {
    let s = m.sample.clone().unwrap_or_default();
    let job = if m.training_id.is_empty() {
        "-".to_string()
    } else {
        format!("{} (rank {})", m.training_id, m.rank)
    };
    vec![
        dash(&m.agent_name),
        s.index.to_string(),
        if s.simulated {
            format!("{} *", s.gpu_uuid)
        } else {
            dash(&s.gpu_uuid)
        },
        opt_num(s.utilization_gpu_percent, 0, "%"),
        opt_num(s.utilization_memory_percent, 0, "%"),
        format!("{}/{}", gib(s.memory_used_bytes), gib(s.memory_total_bytes)),
        opt_num(s.temperature_celsius, 0, "C"),
        opt_num(s.power_draw_watts, 0, "W"),
        opt_num(s.sm_clock_mhz.map(f64::from), 0, ""),
        job,
        if s.throttle_reasons.is_empty() {
            "-".to_string()
        } else {
            s.throttle_reasons.join(",")
        },
    ]
}

fn any_simulated(updates: &[v1::GpuMetricsUpdate]) -> bool {
    updates.iter().any(|u| {
        u.gpus
            .iter()
            .any(|m| m.sample.as_ref().is_some_and(|s| s.simulated))
    })
}

/// One telemetry update: a row per GPU, or the aggregate.
pub fn metrics(u: &v1::GpuMetricsUpdate) -> String {
    let mut out = format!("GPU metrics at {}\n", time(u.time.as_ref()));
    if let Some(a) = &u.aggregate {
        let mut t = Table::new(&AGGREGATE_HEADERS);
        t.row(aggregate_row(a));
        out.push_str(&t.render());
        return out;
    }
    if u.gpus.is_empty() {
        out.push_str("no GPUs match");
        return out;
    }
    let mut t = Table::new(&GPU_METRICS_HEADERS);
    for m in &u.gpus {
        t.row(gpu_metrics_row(m));
    }
    out.push_str(&t.render());
    if any_simulated(std::slice::from_ref(u)) {
        out.push_str("\n* simulated GPU: synthetic samples");
    }
    out
}

/// Stored metrics: one row per bucket (aggregated) or per bucket and GPU.
pub fn metrics_history(updates: &[v1::GpuMetricsUpdate]) -> String {
    if updates.is_empty() {
        return "no metrics in this range".to_string();
    }
    let aggregated = updates.iter().any(|u| u.aggregate.is_some());
    let headers: Vec<&'static str> = if aggregated {
        std::iter::once("TIME").chain(AGGREGATE_HEADERS).collect()
    } else {
        std::iter::once("TIME").chain(GPU_METRICS_HEADERS).collect()
    };
    let mut t = Table::new(&headers);
    for u in updates {
        let at = time(u.time.as_ref());
        if let Some(a) = &u.aggregate {
            t.row(
                std::iter::once(at.clone())
                    .chain(aggregate_row(a))
                    .collect(),
            );
        }
        for m in &u.gpus {
            t.row(
                std::iter::once(at.clone())
                    .chain(gpu_metrics_row(m))
                    .collect(),
            );
        }
    }
    let mut out = t.render();
    if any_simulated(updates) {
        out.push_str("\n* simulated GPU: synthetic samples");
    }
    out
}

/// An alert severity as shown: `WARNING`, `CRITICAL`, ...
pub fn severity_name(severity: i32) -> String {
    v1::AlertSeverity::try_from(severity)
        .map(|s| short_name(s.as_str_name(), "ALERT_SEVERITY_").to_ascii_uppercase())
        .unwrap_or_else(|_| severity.to_string())
}

/// One alert as a line: time, severity, kind, message, what it concerns.
pub fn alert_line(a: &v1::Alert) -> String {
    let severity = severity_name(a.severity);
    let mut about = Vec::new();
    for (name, value) in [
        ("agent", &a.agent_id),
        ("gpu", &a.gpu_uuid),
        ("training", &a.training_id),
    ] {
        if !value.is_empty() {
            about.push(format!("{name} {value}"));
        }
    }
    let (status, at) = match &a.resolve_time {
        Some(t) => ("resolved", time(Some(t))),
        None => ("raised", time(a.raise_time.as_ref())),
    };
    let mut line = format!(
        "{at}  {severity:<8}  {status:<8}  {}: {}",
        a.kind, a.message
    );
    if !about.is_empty() {
        line.push_str(&format!(" ({})", about.join(", ")));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: i32, busy: bool) -> v1::Gpu {
        v1::Gpu {
            info: Some(v1::GpuInfo {
                index,
                uuid: format!("SIM-{index}"),
                name: "Simulated GPU".into(),
                memory_total_bytes: 16 << 30,
                compute_capability: "8.0".into(),
                simulated: true,
                ..Default::default()
            }),
            agent_id: "a-1".into(),
            agent_name: "node1".into(),
            host_name: "node1".into(),
            availability: if busy {
                v1::GpuAvailability::Busy as i32
            } else {
                v1::GpuAvailability::Available as i32
            },
            training_id: if busy { "t-9".into() } else { String::new() },
            rank: 0,
            health_notes: vec![],
            latest_sample: Some(v1::GpuSample {
                memory_used_bytes: 4 << 30,
                memory_total_bytes: 16 << 30,
                utilization_gpu_percent: Some(42.4),
                temperature_celsius: Some(61.0),
                simulated: true,
                ..Default::default()
            }),
            last_seen_time: None,
            ..Default::default()
        }
    }

    #[test]
    fn gpu_table_is_aligned_and_marks_simulated() {
        let text = gpus(&[gpu(0, false), gpu(1, true)]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "AGENT  IDX  UUID   NAME             MEMORY GiB  UTIL  TEMP  STATE      JOB           HEALTH"
        );
        assert_eq!(
            lines[1],
            "node1  0    SIM-0  Simulated GPU *  4.0/16.0    42%   61C   available  -             ok"
        );
        assert_eq!(
            lines[2],
            "node1  1    SIM-1  Simulated GPU *  4.0/16.0    42%   61C   busy       t-9 (rank 0)  ok"
        );
        assert!(lines[3].starts_with("* simulated GPU"));
    }

    #[test]
    fn empty_lists_say_so() {
        assert!(gpus(&[]).starts_with("no GPUs"));
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
        assert!(text.contains("reason:       waiting for 4 GPUs, 2 free"));
        assert!(text.contains("RANK  LOCAL  HOST"));
        assert!(text.contains("code 0"));
        assert!(text.contains("-     -     QUEUED  created"), "{text}");
    }
}
