//! A host doctor's report: one row per check (status, value) with its
//! reason below, and the verdict `cohort agents` shows per agent.

use super::{ago, short_name};
use cohort_proto::v1;
use std::fmt::Write;

fn status(s: i32) -> String {
    v1::DoctorStatus::try_from(s)
        .map(|s| short_name(s.as_str_name(), "DOCTOR_STATUS_"))
        .unwrap_or_else(|_| s.to_string())
}

/// The report as `cohort-agent doctor` prints it, headed by the agent.
pub fn report(r: &v1::DoctorReport) -> String {
    let mut out = String::new();
    let took = r
        .duration
        .as_ref()
        .map_or(0.0, |d| d.seconds as f64 + f64::from(d.nanos) / 1e9);
    let _ = writeln!(out, "agent {} (doctor ran {:.1} s)\n", r.agent, took);
    let _ = writeln!(out, "{:<19} {:<6} VALUE / REASON", "CHECK", "STATUS");
    for c in &r.checks {
        let _ = writeln!(
            out,
            "{:<19} {:<6} {}",
            c.name,
            status(c.status).to_uppercase(),
            c.value
        );
        let _ = writeln!(out, "{:<26} {}", "", c.detail);
    }
    let count =
        |want: v1::DoctorStatus| r.checks.iter().filter(|c| c.status == want as i32).count();
    let _ = write!(
        out,
        "\n{}: {} passed, {} failed, {} skipped",
        if r.ok { "healthy" } else { "NOT READY" },
        count(v1::DoctorStatus::Pass),
        count(v1::DoctorStatus::Fail),
        count(v1::DoctorStatus::Skip)
    );
    out
}

/// `healthy 5m ago`, `2 failed 1h ago` (naming the first failed checks), or `-`.
pub fn verdict(r: Option<&v1::DoctorReport>, now: std::time::SystemTime) -> String {
    let Some(r) = r else {
        return "-".to_string();
    };
    let when = ago(r.finish_time.as_ref(), now);
    if r.ok {
        return format!("healthy {when}");
    }
    let failed: Vec<&str> = r
        .checks
        .iter()
        .filter(|c| c.status == v1::DoctorStatus::Fail as i32)
        .map(|c| c.name.as_str())
        .collect();
    let shown: Vec<&str> = failed.iter().take(3).copied().collect();
    let more = if failed.len() > 3 { ",…" } else { "" };
    format!("failed {}{more} {when}", shown.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(name: &str, s: v1::DoctorStatus) -> v1::DoctorCheck {
        v1::DoctorCheck {
            name: name.into(),
            status: s as i32,
            value: format!("{name} value"),
            detail: format!("{name} reason"),
        }
    }

    #[test]
    fn the_report_and_the_verdict() {
        let now = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1000);
        let mut r = v1::DoctorReport {
            agent: "gpu-7".into(),
            checks: vec![
                check("driver", v1::DoctorStatus::Fail),
                check("cuda", v1::DoctorStatus::Fail),
                check("all_reduce", v1::DoctorStatus::Pass),
                check("topology", v1::DoctorStatus::Skip),
            ],
            ok: false,
            finish_time: Some(prost_types::Timestamp {
                seconds: 700,
                nanos: 0,
            }),
            duration: Some(prost_types::Duration {
                seconds: 2,
                nanos: 500_000_000,
            }),
        };
        let text = report(&r);
        assert!(text.starts_with("agent gpu-7 (doctor ran 2.5 s)"), "{text}");
        assert!(
            text.contains("driver              FAIL   driver value"),
            "{text}"
        );
        assert!(text.contains("driver reason"), "{text}");
        assert!(
            text.ends_with("NOT READY: 1 passed, 2 failed, 1 skipped"),
            "{text}"
        );
        assert_eq!(verdict(Some(&r), now), "failed driver,cuda 5m ago");
        r.ok = true;
        assert_eq!(verdict(Some(&r), now), "healthy 5m ago");
        assert_eq!(verdict(None, now), "-");
    }
}
