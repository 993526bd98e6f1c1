//! The doctor's report as a terminal table: one line per check with its
//! value, its reason on the next, and a verdict at the end.

use super::{Report, Status};
use std::fmt::Write;

pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:<19} {:<6} VALUE / REASON", "CHECK", "STATUS");
    for c in &report.checks {
        let _ = writeln!(
            out,
            "{:<19} {:<6} {}",
            c.name,
            c.status.as_str().to_uppercase(),
            c.value
        );
        let _ = writeln!(out, "{:<26} {}", "", c.detail);
    }
    let count = |s: Status| report.checks.iter().filter(|c| c.status == s).count();
    let _ = writeln!(
        out,
        "\n{}: {} passed, {} failed, {} skipped",
        if report.ok { "healthy" } else { "NOT READY" },
        count(Status::Pass),
        count(Status::Fail),
        count(Status::Skip)
    );
    out
}
