//! `metrics.jsonl`: every line a rank emitted (started, progress, rank_stats,
//! checkpoint, rank_finished, finished), one JSON object per line, with the
//! fields the rank wrote plus where the coordinator stored it: `seq` (the
//! event's sequence number), `attempt` and `time` (RFC 3339, when stored).

use crate::model::{EventPayload, StoredEvent};
use serde_json::Value;

/// The JSON lines of `events`' rank lines, in sequence order; each ends with `\n`.
pub fn metrics_jsonl(events: &[StoredEvent]) -> String {
    let mut out = String::new();
    for event in events {
        let EventPayload::Rank(line) = &event.payload else {
            continue;
        };
        let Ok(Value::Object(mut object)) = serde_json::to_value(line) else {
            continue;
        };
        object.insert("seq".into(), Value::from(event.seq));
        object.insert("attempt".into(), Value::from(event.attempt));
        object.insert(
            "time".into(),
            Value::from(
                event
                    .time
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            ),
        );
        out.push_str(&Value::Object(object).to_string());
        out.push('\n');
    }
    out
}
