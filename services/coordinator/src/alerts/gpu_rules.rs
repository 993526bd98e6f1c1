//! The rules over GPU samples: memory, temperature, utilization under a
//! training, and new uncorrected ECC or critical XID errors.

use super::evaluator::{elapsed, human, Draft, Evaluator, GpuState, Level};
use crate::fleet::GpuReading;
use crate::model::{AlertKind, Transition};
use chrono::{DateTime, Utc};

/// `Firing` above `threshold`, `Clear` at or below `threshold - band`.
fn above(value: f64, threshold: f64, band: f64) -> Level {
    if value > threshold {
        Level::Firing
    } else if value <= threshold - band {
        Level::Clear
    } else {
        Level::Between
    }
}

/// `Firing` below `threshold`, `Clear` at or above `threshold + band`.
fn below(value: f64, threshold: f64, band: f64) -> Level {
    if value < threshold {
        Level::Firing
    } else if value >= threshold + band {
        Level::Clear
    } else {
        Level::Between
    }
}

impl Evaluator {
    /// One GPU sample, received at `now`.
    pub fn observe(&mut self, r: &GpuReading, now: DateTime<Utc>) -> Vec<Transition> {
        let s = &r.sample;
        let uuid = s.gpu_uuid.as_str();
        let settings = self.settings.clone();
        let base = || Draft {
            agent_id: Some(r.agent_id.clone()),
            gpu_uuid: Some(uuid.to_string()),
            training_id: r.hold.as_ref().map(|h| h.training_id.clone()),
            ..Draft::default()
        };
        // Formatted only when an alert is raised (this runs for every sample).
        let gpu = || format!("GPU {} of {}", s.index, r.agent_name);
        let mut out = Vec::new();

        if s.memory_total_bytes > 0 {
            let percent = s.memory_used_bytes as f64 * 100.0 / s.memory_total_bytes as f64;
            let level = above(
                percent,
                settings.memory_percent,
                settings.memory_hysteresis_percent,
            );
            out.extend(self.check(
                AlertKind::GpuMemoryHigh,
                uuid,
                level,
                settings.memory_for,
                now,
                || Draft {
                    message: format!(
                        "{}: memory {percent:.1}% used for {} (threshold {}%)",
                        gpu(),
                        human(settings.memory_for),
                        settings.memory_percent
                    ),
                    value: Some(percent),
                    threshold: Some(settings.memory_percent),
                    ..base()
                },
            ));
        }

        if let Some(t) = s.temperature_celsius {
            let level = above(
                t,
                settings.temperature_celsius,
                settings.temperature_hysteresis_celsius,
            );
            out.extend(self.check(
                AlertKind::GpuTemperatureHigh,
                uuid,
                level,
                settings.temperature_for,
                now,
                || Draft {
                    message: format!(
                        "{}: temperature {t:.0} °C (threshold {} °C)",
                        gpu(),
                        settings.temperature_celsius
                    ),
                    value: Some(t),
                    threshold: Some(settings.temperature_celsius),
                    ..base()
                },
            ));
        }

        let level = match (&r.hold, s.utilization_gpu_percent) {
            (None, _) => Level::Clear,
            (Some(_), None) => Level::Between,
            (Some(_), Some(u)) => below(
                u,
                settings.utilization_percent,
                settings.utilization_hysteresis_percent,
            ),
        };
        let util = s.utilization_gpu_percent.unwrap_or_default();
        out.extend(self.check(
            AlertKind::GpuUtilizationLow,
            uuid,
            level,
            settings.utilization_for,
            now,
            || {
                let hold = r.hold.as_ref().expect("firing only while held");
                Draft {
                    message: format!(
                        "{}: utilization {util:.0}% for {} while training {} rank {} runs on it (threshold {}%)",
                        gpu(),
                        human(settings.utilization_for),
                        hold.training_id,
                        hold.rank,
                        settings.utilization_percent
                    ),
                    value: Some(util),
                    threshold: Some(settings.utilization_percent),
                    ..base()
                }
            },
        ));

        let state = self.gpus.entry(uuid.to_string()).or_insert(GpuState {
            agent_id: r.agent_id.clone(),
            last_seen: now,
            counters: Default::default(),
        });
        state.agent_id = r.agent_id.clone();
        state.last_seen = now;
        out.extend(self.counter_rule(
            AlertKind::GpuEccUncorrected,
            uuid,
            s.ecc_errors_uncorrected,
            now,
            |new, total| Draft {
                message: format!(
                    "{}: {new} new uncorrected ECC error(s), {total} since the driver loaded",
                    gpu(),
                ),
                ..base()
            },
        ));
        out.extend(self.counter_rule(
            AlertKind::GpuXidError,
            uuid,
            s.xid_errors,
            now,
            |new, total| Draft {
                message: format!(
                    "{}: {new} new critical XID error(s){}, {total} since its agent started",
                    gpu(),
                    s.last_xid
                        .map(|x| format!(" (last: XID {x})"))
                        .unwrap_or_default(),
                ),
                ..base()
            },
        ));
        out.extend(self.counters_quiet(uuid, now));
        out
    }

    /// An error counter (uncorrected ECC, XID): only an increase between two
    /// samples is new (a counter seen for the first time counts errors from
    /// before cohort watched). Raises `kind` on an increase, with the total
    /// as value and the previous total as threshold.
    fn counter_rule(
        &mut self,
        kind: AlertKind,
        uuid: &str,
        total: Option<u64>,
        now: DateTime<Utc>,
        draft: impl FnOnce(u64, u64) -> Draft,
    ) -> Option<Transition> {
        let counter = self.gpus.get_mut(uuid)?.counters.entry(kind).or_default();
        let total = total?;
        let before = counter.total.replace(total)?;
        if total <= before {
            return None;
        }
        counter.last_increase = Some(now);
        self.check(
            kind,
            uuid,
            Level::Firing,
            std::time::Duration::ZERO,
            now,
            || Draft {
                value: Some(total as f64),
                threshold: Some(before as f64),
                ..draft(total - before, total)
            },
        )
    }

    /// Resolves a GPU's error-counter alerts once no increase came for
    /// `ecc_quiet`.
    pub(super) fn counters_quiet(&mut self, uuid: &str, now: DateTime<Utc>) -> Vec<Transition> {
        let Some(state) = self.gpus.get(uuid) else {
            return Vec::new();
        };
        let quiet: Vec<AlertKind> = state
            .counters
            .iter()
            .filter(|(_, c)| {
                c.last_increase
                    .is_some_and(|t| elapsed(t, now) >= self.settings.ecc_quiet)
            })
            .map(|(kind, _)| *kind)
            .collect();
        quiet
            .into_iter()
            .filter_map(|kind| {
                self.check(
                    kind,
                    uuid,
                    Level::Clear,
                    std::time::Duration::ZERO,
                    now,
                    Draft::default,
                )
            })
            .collect()
    }
}
