//! CPU time and peak RSS of a process, from /proc.

use anyhow::{bail, Context as _};
use std::time::Duration;

/// utime + stime of `pid` (or `self`), from /proc/<pid>/stat.
pub fn cpu_time(pid: Option<u32>) -> anyhow::Result<Duration> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/stat"),
        None => "/proc/self/stat".to_string(),
    };
    let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    // The command name is in parentheses and may hold spaces: fields count
    // from after the last ')'. utime and stime are fields 14 and 15 (1-based),
    // i.e. the 12th and 13th after the name.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("no ')' in /proc stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if fields.len() < 13 {
        bail!("short {path}");
    }
    let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let per_second = if per_second > 0 {
        per_second as u64
    } else {
        100
    };
    Ok(Duration::from_micros(ticks * 1_000_000 / per_second))
}

/// Peak resident set size (VmHWM) of `pid` (or `self`), in bytes.
pub fn peak_rss(pid: Option<u32>) -> anyhow::Result<u64> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/status"),
        None => "/proc/self/status".to_string(),
    };
    let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .context("no VmHWM")?;
    let kib: u64 = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()?;
    Ok(kib * 1024)
}

/// CPU used between two readings over `wall`, as percent of one core.
pub fn percent_of_core(before: Duration, after: Duration, wall: Duration) -> f64 {
    after.saturating_sub(before).as_secs_f64() / wall.as_secs_f64() * 100.0
}

/// Time the threads of `pid` (or `self`) spent runnable but waiting for a
/// CPU (the run queue), summed over its live threads, from
/// /proc/<pid>/task/*/schedstat (field 2, ns). Threads that exit take their
/// share with them, so this is a lower bound.
pub fn run_queue_wait(pid: Option<u32>) -> anyhow::Result<Duration> {
    let dir = match pid {
        Some(pid) => format!("/proc/{pid}/task"),
        None => "/proc/self/task".to_string(),
    };
    let mut nanos = 0u64;
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {dir}"))? {
        let path = entry?.path().join("schedstat");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        if let Some(wait) = text.split_whitespace().nth(1) {
            nanos += wait.parse::<u64>().unwrap_or(0);
        }
    }
    Ok(Duration::from_nanos(nanos))
}
