//! A report's resizes: the lines of `cohort train report` and its JSON.

use super::table::Table;
use cohort_proto::v1;
use serde_json::{json, Value};

/// Nothing when it never resized; else the total and a row per resize.
pub fn text(r: &v1::ResizeSummary) -> String {
    if r.count == 0 {
        return String::new();
    }
    let mut out = format!(
        "\n\nresized {} time(s); from each decision to the new gang sent to its agents: {:.1} s in all\n",
        r.count, r.seconds
    );
    let mut rows = Table::new(&[
        "TIME",
        "NEW ATTEMPT",
        "RANKS",
        "WHY",
        "RESUMED FROM",
        "SECONDS",
    ]);
    for x in &r.records {
        rows.row(vec![
            super::time(x.time.as_ref()),
            x.attempt.to_string(),
            format!("{} -> {}", x.from_world_size, x.to_world_size),
            x.reason.clone(),
            x.step
                .map_or("the start".to_string(), |s| format!("step {s}")),
            format!("{:.1}", x.seconds),
        ]);
    }
    out += &rows.render();
    out
}

/// The resizes as JSON.
pub fn json(r: &v1::ResizeSummary) -> Value {
    json!({
        "count": r.count,
        "seconds": r.seconds,
        "records": r.records.iter().map(|x| json!({
            "time": super::time(x.time.as_ref()),
            "attempt": x.attempt,
            "from_world_size": x.from_world_size,
            "to_world_size": x.to_world_size,
            "step": x.step,
            "seconds": x.seconds,
            "reason": x.reason,
        })).collect::<Vec<_>>(),
    })
}
