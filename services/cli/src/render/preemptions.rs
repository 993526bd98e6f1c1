//! A report's preemptions: the lines of `cohort train report` and its JSON.

use super::table::Table;
use cohort_proto::v1;
use serde_json::{json, Value};

/// Nothing when it was never stopped by a notice; else the total and a row
/// per preemption.
pub fn text(p: &v1::PreemptionSummary) -> String {
    if p.count == 0 {
        return String::new();
    }
    let mut out = format!(
        "\n\npreempted {} time(s), {:.1} GPU-seconds lost\n",
        p.count, p.gpu_seconds_lost
    );
    let mut rows = Table::new(&[
        "TIME",
        "ATTEMPT",
        "KIND",
        "BY",
        "RESUMED FROM",
        "LOST GPU-S",
        "SAVED ON NOTICE",
    ]);
    for r in &p.records {
        rows.row(vec![
            super::time(r.time.as_ref()),
            r.attempt.to_string(),
            match r.priority_class.as_str() {
                "" => r.kind.clone(),
                class => format!("{} ({class})", r.kind),
            },
            r.by.clone(),
            r.resume_step
                .map_or("the start".to_string(), |s| format!("step {s}")),
            format!("{:.1}", r.gpu_seconds_lost),
            if r.checkpointed { "yes" } else { "no" }.to_string(),
        ]);
    }
    out += &rows.render();
    out
}

/// The preemptions as JSON.
pub fn json(p: &v1::PreemptionSummary) -> Value {
    json!({
        "count": p.count,
        "gpu_seconds_lost": p.gpu_seconds_lost,
        "records": p.records.iter().map(|r| json!({
            "time": super::time(r.time.as_ref()),
            "attempt": r.attempt,
            "by": r.by,
            "kind": r.kind,
            "priority_class": r.priority_class,
            "resume_step": r.resume_step,
            "gpu_seconds_lost": r.gpu_seconds_lost,
            "checkpointed": r.checkpointed,
        })).collect::<Vec<_>>(),
    })
}
