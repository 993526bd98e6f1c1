//! A host doctor's report as the coordinator keeps it: the latest per agent,
//! stored as JSON beside the agent's row.

use serde::{Deserialize, Serialize};

/// A check's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DoctorStatus {
    Pass,
    Fail,
    Skip,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DoctorCheck {
    pub name: String,
    pub status: DoctorStatus,
    pub value: String,
    pub detail: String,
}

/// What the doctor found on one agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DoctorReport {
    pub agent: String,
    pub checks: Vec<DoctorCheck>,
    pub ok: bool,
    /// When it finished, ms since the Unix epoch.
    pub finished_at_ms: i64,
    pub duration_ms: u64,
}

/// Checks one report may carry (the doctor has nine).
pub const MAX_CHECKS: usize = 32;
/// Bytes one check's name, value or detail may carry.
pub const MAX_TEXT: usize = 2048;

impl DoctorReport {
    /// Bounds what an agent sent: at most [`MAX_CHECKS`] checks, texts cut
    /// at [`MAX_TEXT`] bytes (on a character boundary).
    pub fn bounded(mut self) -> Self {
        self.checks.truncate(MAX_CHECKS);
        for c in &mut self.checks {
            for text in [&mut c.name, &mut c.value, &mut c.detail] {
                cut(text);
            }
        }
        cut(&mut self.agent);
        self
    }
}

fn cut(text: &mut String) {
    if text.len() > MAX_TEXT {
        let mut end = MAX_TEXT;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agents_report_is_bounded() {
        let check = DoctorCheck {
            name: "é".repeat(MAX_TEXT),
            status: DoctorStatus::Pass,
            value: String::new(),
            detail: "x".repeat(MAX_TEXT + 10),
        };
        let report = DoctorReport {
            agent: "a".into(),
            checks: vec![check; MAX_CHECKS + 5],
            ok: true,
            finished_at_ms: 0,
            duration_ms: 1,
        }
        .bounded();
        assert_eq!(report.checks.len(), MAX_CHECKS);
        assert!(report.checks[0].name.len() <= MAX_TEXT);
        assert_eq!(report.checks[0].detail.len(), MAX_TEXT);
    }
}
