//! The rules over GPU samples: memory, temperature, utilization under a
//! training, and new uncorrected ECC errors.

use super::evaluator::{elapsed, human, Draft, Evaluator, GpuState, Level};
use super::model::{AlertKind, Transition};
use crate::fleet::GpuReading;
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

        // ECC: only an increase between two samples is new; a counter seen
        // for the first time counts errors since the driver loaded.
        let state = self.gpus.entry(uuid.to_string()).or_insert(GpuState {
            agent_id: r.agent_id.clone(),
            last_seen: now,
            ecc_uncorrected: None,
            ecc_last_increase: None,
        });
        state.agent_id = r.agent_id.clone();
        state.last_seen = now;
        let previous = state.ecc_uncorrected;
        if s.ecc_errors_uncorrected.is_some() {
            state.ecc_uncorrected = s.ecc_errors_uncorrected;
        }
        if let (Some(before), Some(total)) = (previous, s.ecc_errors_uncorrected) {
            if total > before {
                state.ecc_last_increase = Some(now);
                let new = total - before;
                out.extend(self.check(
                    AlertKind::GpuEccUncorrected,
                    uuid,
                    Level::Firing,
                    std::time::Duration::ZERO,
                    now,
                    || Draft {
                        message: format!(
                            "{}: {new} new uncorrected ECC error(s), {total} since the driver loaded",
                            gpu(),
                        ),
                        value: Some(total as f64),
                        threshold: Some(before as f64),
                        ..base()
                    },
                ));
            }
        }
        out.extend(self.ecc_quiet(uuid, now));
        out
    }

    /// Resolves a GPU's ECC alert once no increase came for `ecc_quiet`.
    pub(super) fn ecc_quiet(&mut self, uuid: &str, now: DateTime<Utc>) -> Option<Transition> {
        let last = self.gpus.get(uuid)?.ecc_last_increase?;
        if elapsed(last, now) < self.settings.ecc_quiet {
            return None;
        }
        self.check(
            AlertKind::GpuEccUncorrected,
            uuid,
            Level::Clear,
            std::time::Duration::ZERO,
            now,
            Draft::default,
        )
    }
}
