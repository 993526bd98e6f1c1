//! What a webhook is told: an announcement (a training ended, failed or was
//! preempted; an alert was raised), its body in either format, and the
//! body's signature.

use crate::model::Alert;
use crate::persistence::webhooks::Transition;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

/// The events a webhook may ask for.
pub const EVENTS: [&str; 4] = ["ended", "failed", "preempted", "alert"];
/// The body formats.
pub const FORMATS: [&str; 2] = ["json", "slack"];
/// The header carrying `sha256=<hex HMAC-SHA256 of the body>`.
pub const SIGNATURE_HEADER: &str = "X-Cohort-Signature";
/// The header naming the event.
pub const EVENT_HEADER: &str = "X-Cohort-Event";
/// The header carrying the delivery's id (the same on each retry).
pub const DELIVERY_HEADER: &str = "X-Cohort-Delivery";

const TERMINAL: [&str; 3] = ["SUCCEEDED", "FAILED", "CANCELLED"];
const PREEMPTED: &str = "PREEMPTED: ";

/// One thing to tell the hooks that asked for its event.
#[derive(Debug, Clone, PartialEq)]
pub struct Announcement {
    pub event: &'static str,
    /// Whose hooks hear it (cluster-wide hooks hear everything).
    pub team: Option<String>,
    pub training_id: Option<String>,
    pub time: DateTime<Utc>,
    /// The `training` or `alert` object of the body.
    pub subject: Value,
    /// One line for people (the Slack text).
    pub summary: String,
}

/// What a state transition announces: `ended` (and `failed`) for a
/// terminal state, `preempted` for a preemption or reclaim.
pub fn of_transition(t: &Transition, console: Option<&str>) -> Vec<Announcement> {
    let mut events = Vec::new();
    if TERMINAL.contains(&t.to_state.as_str()) {
        events.push("ended");
        if t.to_state == "FAILED" {
            events.push("failed");
        }
    }
    if t.reason.starts_with(PREEMPTED) {
        events.push("preempted");
    }
    let labels: Value = serde_json::from_str(&t.labels_json).unwrap_or_else(|_| json!({}));
    let link = console.map(|c| format!("{}/trainings/{}", c.trim_end_matches('/'), t.training_id));
    let subject = json!({
        "id": t.training_id,
        "name": t.display_name,
        "team": t.team,
        "state": t.to_state,
        "state_reason": t.reason,
        "attempt": t.attempt,
        "labels": labels,
        "link": link,
    });
    let name = if t.display_name.is_empty() {
        &t.training_id
    } else {
        &t.display_name
    };
    let mut summary = format!("Training {name} (team {}) is {}", t.team, t.to_state);
    if !t.reason.is_empty() {
        summary.push_str(&format!(": {}", t.reason));
    }
    if let Some(link) = &link {
        summary.push_str(&format!(" <{link}|open>"));
    }
    events
        .into_iter()
        .map(|event| Announcement {
            event,
            team: Some(t.team.clone()),
            training_id: Some(t.training_id.clone()),
            time: t.at,
            subject: subject.clone(),
            summary: summary.clone(),
        })
        .collect()
}

/// A raised alert (`team`: the team of its training, if it has one).
pub fn of_alert(a: &Alert, team: Option<String>) -> Announcement {
    Announcement {
        event: "alert",
        team,
        training_id: a.training_id.clone(),
        time: a.raise_time,
        subject: json!({
            "id": a.id,
            "kind": a.kind.as_str(),
            "severity": a.severity.as_str(),
            "message": a.message,
            "agent_id": a.agent_id,
            "gpu_uuid": a.gpu_uuid,
            "training_id": a.training_id,
            "value": a.value,
            "threshold": a.threshold,
        }),
        summary: format!("[{}] {}", a.severity.as_str(), a.message),
    }
}

/// The body one hook gets.
pub fn body(a: &Announcement, format: &str, delivery: &str) -> Vec<u8> {
    let value = match format {
        "slack" => json!({ "text": a.summary }),
        _ => {
            let key = if a.event == "alert" {
                "alert"
            } else {
                "training"
            };
            json!({
                "event": a.event,
                "delivery": delivery,
                "time": a.time.to_rfc3339(),
                key: a.subject,
            })
        }
    };
    serde_json::to_vec(&value).unwrap_or_default()
}

/// `sha256=<hex>`: HMAC-SHA256 of `body` under `secret`.
pub fn signature(secret: &str, body: &[u8]) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes a key of any length");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transition(to: &str, reason: &str) -> Transition {
        Transition {
            id: 7,
            training_id: "trn-1".into(),
            team: "vision".into(),
            display_name: "sae-l1".into(),
            labels_json: r#"{"sweep":"a"}"#.into(),
            attempt: 2,
            to_state: to.into(),
            reason: reason.into(),
            at: DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
        }
    }

    #[test]
    fn transitions_announce_what_they_are() {
        let events = |to, reason| {
            of_transition(&transition(to, reason), None)
                .iter()
                .map(|a| a.event)
                .collect::<Vec<_>>()
        };
        assert_eq!(events("SUCCEEDED", ""), ["ended"]);
        assert_eq!(events("FAILED", "exit 1"), ["ended", "failed"]);
        assert_eq!(events("CANCELLED", "by x"), ["ended"]);
        assert_eq!(
            events("QUEUED", "PREEMPTED: by urgent-1 (class urgent)"),
            ["preempted"]
        );
        assert!(events("RUNNING", "placed").is_empty());
        assert!(events("QUEUED", "restart 1 of 2").is_empty());
    }

    #[test]
    fn bodies_in_both_formats() {
        let a = &of_transition(&transition("FAILED", "exit 1"), Some("https://c.example/"))[1];
        let json: Value = serde_json::from_slice(&body(a, "json", "dlv-1")).unwrap();
        assert_eq!(json["event"], "failed");
        assert_eq!(json["delivery"], "dlv-1");
        assert_eq!(json["training"]["state"], "FAILED");
        assert_eq!(json["training"]["labels"]["sweep"], "a");
        assert_eq!(
            json["training"]["link"],
            "https://c.example/trainings/trn-1"
        );
        let slack: Value = serde_json::from_slice(&body(a, "slack", "dlv-1")).unwrap();
        assert_eq!(
            slack["text"],
            "Training sae-l1 (team vision) is FAILED: exit 1 <https://c.example/trainings/trn-1|open>"
        );
    }

    #[test]
    fn the_signature_is_rfc_4231_hmac_sha256() {
        // RFC 4231, test case 2.
        assert_eq!(
            signature("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
