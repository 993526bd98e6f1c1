//! A program training as the CLI shows it: its command, and its progress —
//! what the program reported and nothing else.

use super::float;
use cohort_proto::v1;

/// The most metrics shown on a progress line (the rest are in `-o json`).
const SHOWN_METRICS: usize = 6;

/// The progress bar's width in characters.
const BAR_WIDTH: usize = 30;

/// `[#####-----] 40/80  50%  loss 0.3100  episode_return 0.98  lr 0.0500`;
/// without a total, `step 40  loss ...`.
pub fn progress_text(p: &v1::ProgramProgress) -> String {
    let head = match p.total_steps.filter(|t| *t > 0) {
        Some(total) => {
            let fraction = (p.step as f64 / total as f64).clamp(0.0, 1.0);
            let filled = (fraction * BAR_WIDTH as f64).round() as usize;
            format!(
                "[{}{}] {}/{total} {:>3.0}%",
                "#".repeat(filled),
                "-".repeat(BAR_WIDTH - filled),
                p.step,
                fraction * 100.0
            )
        }
        None => format!("step {}", p.step),
    };
    let mut parts = vec![head];
    if let Some(loss) = p.loss {
        parts.push(format!("loss {}", float(loss)));
    }
    parts.extend(metrics(p));
    if p.finished {
        parts.push("finished".to_string());
    }
    parts.join("  ")
}

/// `name value` for the first metrics by name.
fn metrics(p: &v1::ProgramProgress) -> Vec<String> {
    let mut names: Vec<&String> = p.metrics.keys().collect();
    names.sort();
    let mut shown: Vec<String> = names
        .iter()
        .take(SHOWN_METRICS)
        .map(|n| format!("{n} {}", float(p.metrics[*n])))
        .collect();
    if names.len() > SHOWN_METRICS {
        shown.push(format!("(+{} more)", names.len() - SHOWN_METRICS));
    }
    shown
}

/// The STEP and LOSS cells of the trainings table.
pub fn cells(p: &v1::ProgramProgress) -> (String, String) {
    let step = match p.total_steps {
        Some(t) => format!("{}/{t}", p.step),
        None => p.step.to_string(),
    };
    (step, p.loss.map_or_else(|| "-".to_string(), float))
}

/// `program /venv/bin/python train.py --epochs 3 in /opt/team/src, 20 GiB/rank`.
pub fn config_summary(p: &v1::ProgramConfig) -> String {
    let command: Vec<&str> = p
        .command
        .iter()
        .enumerate()
        .map(|(i, a)| match i {
            // The program by its file name; its arguments as given.
            0 => a.rsplit('/').next().unwrap_or(a),
            _ => a.as_str(),
        })
        .collect();
    let dir = match (&p.code, p.working_dir.as_str()) {
        (Some(_), "") => "the code snapshot".to_string(),
        (Some(_), dir) => format!("the code snapshot's {dir}"),
        (None, dir) => dir.to_string(),
    };
    format!(
        "program {} in {dir}, {} GiB/rank",
        command.join(" "),
        p.memory_gib_per_rank
    )
}

/// `sha256:0123456789ab (12 files, 34 KiB, git 1a2b3c4d5e (dirty))`.
pub fn code_text(c: &v1::CodeSnapshot) -> String {
    let git = match &c.git_commit {
        Some(commit) => format!(
            ", git {}{}",
            &commit[..commit.len().min(10)],
            if c.git_dirty { " (dirty)" } else { "" }
        ),
        None => String::new(),
    };
    // An upload made by hand may leave the count out.
    let files = match c.files {
        0 => String::new(),
        1 => "1 file, ".to_string(),
        n => format!("{n} files, "),
    };
    format!(
        "sha256:{} ({files}{} KiB{git})",
        &c.sha256[..c.sha256.len().min(12)],
        c.size_bytes.div_ceil(1024)
    )
}

/// A program's metrics over its run, one row each.
pub fn metrics_table(metrics: &[v1::ProgramMetric]) -> String {
    let mut t = super::table::Table::new(&["METRIC", "FIRST", "LAST", "MIN", "MAX", "POINTS"]);
    for m in metrics {
        t.row(vec![
            m.name.clone(),
            format!("{} (step {})", float(m.first), m.first_step),
            format!("{} (step {})", float(m.last), m.last_step),
            float(m.min),
            float(m.max),
            m.points.to_string(),
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_was_reported_is_shown() {
        let mut p = v1::ProgramProgress {
            step: 40,
            total_steps: Some(80),
            loss: Some(0.31),
            metrics: [("episode_return".to_string(), 0.98)].into(),
            finished: false,
        };
        let text = progress_text(&p);
        assert!(
            text.starts_with("[###############---------------] 40/80  50%"),
            "{text}"
        );
        assert!(
            text.ends_with("loss 0.3100  episode_return 0.9800"),
            "{text}"
        );
        p.total_steps = None;
        p.loss = None;
        p.metrics.clear();
        assert_eq!(progress_text(&p), "step 40");
        assert_eq!(cells(&p), ("40".to_string(), "-".to_string()));
    }
}
