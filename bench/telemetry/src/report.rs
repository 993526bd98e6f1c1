//! The printed result: one block of figures and one Markdown table row
//! (the columns of docs/benchmarks.md "Telemetry fan-out").

use crate::agents::GPUS_PER_AGENT;
use crate::histogram::Histogram;
use crate::watchers::Seen;
use std::fmt::Write as _;
use std::time::Duration;

pub struct Figures {
    pub backend: &'static str,
    pub agents: usize,
    pub watchers: usize,
    pub duration: Duration,
    pub sent_in_window: u64,
    pub sent_total: u64,
    pub blocked_sends: u64,
    pub ingested_per_s: Option<f64>,
    pub stored: Option<u64>,
    pub seen: Vec<Seen>,
    pub coordinator_cpu_percent: Option<f64>,
    pub bench_cpu_percent: Option<f64>,
    /// Time runnable but waiting for a CPU, as percent of one core.
    pub coordinator_wait_percent: Option<f64>,
    pub bench_wait_percent: Option<f64>,
    /// The 1-minute load average at the end of the window.
    pub load_average: Option<String>,
    pub coordinator_peak_rss: Option<u64>,
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "n/a".to_string(), |v| format!("{v:.digits$}"))
}

fn ms(micros: u64) -> String {
    format!("{:.1}", micros as f64 / 1000.0)
}

/// What the watchers got, summed over them.
struct Delivery<'a> {
    latency: Histogram,
    lost_total: u64,
    lost_max: u64,
    delivered_mean: f64,
    delivered_min: f64,
    lagged: u64,
    missed: u64,
    duplicates: u64,
    errors: Vec<&'a str>,
    /// Sent in the window but not stored (when the bench could count).
    stored_lost: Option<i64>,
    rss_mib: Option<f64>,
}

impl Figures {
    /// The figures as lines for a person, then one row of the table in
    /// docs/benchmarks.md.
    pub fn render(&self) -> String {
        let d = self.delivery();
        let mut out = self.lines(&d);
        out.push_str(&self.table_row(&d));
        out
    }

    fn delivery(&self) -> Delivery<'_> {
        let secs = self.duration.as_secs_f64();
        let mut latency = Histogram::default();
        for s in &self.seen {
            latency.merge(&s.latency);
        }
        let received: Vec<u64> = self.seen.iter().map(|s| s.received).collect();
        let lost: Vec<u64> = received
            .iter()
            .map(|r| self.sent_in_window.saturating_sub(*r))
            .collect();
        Delivery {
            latency,
            lost_total: lost.iter().sum(),
            lost_max: lost.iter().copied().max().unwrap_or(0),
            delivered_mean: if received.is_empty() {
                0.0
            } else {
                received.iter().sum::<u64>() as f64 / received.len() as f64 / secs
            },
            delivered_min: received.iter().copied().min().unwrap_or(0) as f64 / secs,
            lagged: self.seen.iter().map(|s| s.lagged_notices).sum(),
            missed: self.seen.iter().map(|s| s.missed_batches).sum(),
            duplicates: self.seen.iter().map(|s| s.duplicates).sum(),
            errors: self
                .seen
                .iter()
                .filter_map(|s| s.error.as_deref())
                .collect(),
            stored_lost: self.stored.map(|s| self.sent_in_window as i64 - s as i64),
            rss_mib: self
                .coordinator_peak_rss
                .map(|b| b as f64 / (1024.0 * 1024.0)),
        }
    }

    fn lines(&self, d: &Delivery) -> String {
        let secs = self.duration.as_secs_f64();
        let mut out = String::new();
        let w = &mut out;
        let _ = writeln!(w, "backend                      {}", self.backend);
        let _ = writeln!(
            w,
            "agents x GPUs                {} x {} = {} GPUs",
            self.agents,
            GPUS_PER_AGENT,
            self.agents * GPUS_PER_AGENT
        );
        let _ = writeln!(w, "watchers                     {}", self.watchers);
        let _ = writeln!(w, "window                       {secs:.0} s");
        let _ = writeln!(
            w,
            "sent in window               {} ({:.0}/s; {} in the whole run; {} sends waited on a full buffer)",
            self.sent_in_window,
            self.sent_in_window as f64 / secs,
            self.sent_total,
            self.blocked_sends
        );
        let _ = writeln!(
            w,
            "ingested (coordinator)       {} samples/s",
            opt(self.ingested_per_s, 0)
        );
        match self.stored {
            Some(stored) => {
                let _ = writeln!(
                    w,
                    "stored (gpu_metrics)         {stored} ({:.0}/s); sent - stored = {}",
                    stored as f64 / secs,
                    d.stored_lost.unwrap_or(0)
                );
            }
            None => {
                let _ = writeln!(w, "stored (gpu_metrics)         n/a");
            }
        }
        let _ = writeln!(
            w,
            "delivered per watcher        mean {:.0}/s, min {:.0}/s",
            d.delivered_mean, d.delivered_min
        );
        let _ = writeln!(
            w,
            "lost per watcher             total {}, worst watcher {} (sent - received)",
            d.lost_total, d.lost_max
        );
        let _ = writeln!(
            w,
            "lagged notices               {} (missed batches {}); duplicates {}",
            d.lagged, d.missed, d.duplicates
        );
        let _ = writeln!(
            w,
            "latency sample->watcher      p50 {} ms, p99 {} ms, max {} ms ({} samples)",
            ms(d.latency.quantile(0.5)),
            ms(d.latency.quantile(0.99)),
            ms(d.latency.max()),
            d.latency.count()
        );
        let _ = writeln!(
            w,
            "coordinator CPU              {}% of one core; peak RSS {} MiB",
            opt(self.coordinator_cpu_percent, 0),
            opt(d.rss_mib, 0)
        );
        let _ = writeln!(
            w,
            "coordinator run-queue wait   {}% of one core (runnable, waiting for a CPU)",
            opt(self.coordinator_wait_percent, 0)
        );
        let _ = writeln!(
            w,
            "bench CPU                    {}% of one core; run-queue wait {}%",
            opt(self.bench_cpu_percent, 0),
            opt(self.bench_wait_percent, 0)
        );
        let _ = writeln!(
            w,
            "machine load average (1 min) {}",
            self.load_average.as_deref().unwrap_or("n/a")
        );
        if let Some(first) = d.errors.first() {
            let _ = writeln!(
                w,
                "watcher streams that ended early: {} (first: {first})",
                d.errors.len()
            );
        }
        out
    }

    fn table_row(&self, d: &Delivery) -> String {
        let secs = self.duration.as_secs_f64();
        format!(
            "| {} | {} | {} | {} | {:.0} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} / {} | {} | {} | {} |\n",
            self.backend,
            self.agents,
            self.agents * GPUS_PER_AGENT,
            self.watchers,
            self.sent_in_window as f64 / secs,
            opt(self.ingested_per_s, 0),
            self.stored
                .map_or_else(|| "n/a".into(), |s| format!("{:.0}", s as f64 / secs)),
            d.delivered_mean,
            ms(d.latency.quantile(0.5)),
            ms(d.latency.quantile(0.99)),
            ms(d.latency.max()),
            d.stored_lost.map_or_else(|| "n/a".into(), |l| l.to_string()),
            format_args!("{} ({})", d.lost_total, d.lagged),
            opt(self.coordinator_cpu_percent, 0),
            opt(self.coordinator_wait_percent, 0),
            opt(d.rss_mib, 0),
            opt(self.bench_cpu_percent, 0),
            self.load_average.as_deref().unwrap_or("n/a"),
        )
    }
}
