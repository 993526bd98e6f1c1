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

/// One reading, as the rules' alerts describe it.
struct Seen<'a>(&'a GpuReading);

impl Seen<'_> {
    fn uuid(&self) -> &str {
        &self.0.sample.gpu_uuid
    }

    /// What every alert of this GPU carries.
    fn base(&self) -> Draft {
        Draft {
            agent_id: Some(self.0.agent_id.clone()),
            gpu_uuid: Some(self.uuid().to_string()),
            training_id: self.0.hold.as_ref().map(|h| h.training_id.clone()),
            ..Draft::default()
        }
    }

    /// Formatted only when an alert is raised (the rules run for every sample).
    fn gpu(&self) -> String {
        format!("GPU {} of {}", self.0.sample.index, self.0.agent_name)
    }
}

impl Evaluator {
    /// One GPU sample, received at `now`.
    pub fn observe(&mut self, r: &GpuReading, now: DateTime<Utc>) -> Vec<Transition> {
        let seen = Seen(r);
        let mut out = Vec::new();
        out.extend(self.memory_rule(&seen, now));
        out.extend(self.temperature_rule(&seen, now));
        out.extend(self.utilization_rule(&seen, now));
        let state = self
            .gpus
            .entry(seen.uuid().to_string())
            .or_insert(GpuState {
                agent_id: r.agent_id.clone(),
                last_seen: now,
                counters: Default::default(),
            });
        state.agent_id = r.agent_id.clone();
        state.last_seen = now;
        out.extend(self.error_rules(&seen, now));
        out.extend(self.counters_quiet(seen.uuid(), now));
        out
    }

    fn memory_rule(&mut self, seen: &Seen, now: DateTime<Utc>) -> Option<Transition> {
        let s = &seen.0.sample;
        if s.memory_total_bytes == 0 {
            return None;
        }
        let settings = self.settings.clone();
        let percent = s.memory_used_bytes as f64 * 100.0 / s.memory_total_bytes as f64;
        let level = above(
            percent,
            settings.memory_percent,
            settings.memory_hysteresis_percent,
        );
        self.check(
            AlertKind::GpuMemoryHigh,
            seen.uuid(),
            level,
            settings.memory_for,
            now,
            || Draft {
                message: format!(
                    "{}: memory {percent:.1}% used for {} (threshold {}%)",
                    seen.gpu(),
                    human(settings.memory_for),
                    settings.memory_percent
                ),
                value: Some(percent),
                threshold: Some(settings.memory_percent),
                ..seen.base()
            },
        )
    }

    fn temperature_rule(&mut self, seen: &Seen, now: DateTime<Utc>) -> Option<Transition> {
        let t = seen.0.sample.temperature_celsius?;
        let settings = self.settings.clone();
        let level = above(
            t,
            settings.temperature_celsius,
            settings.temperature_hysteresis_celsius,
        );
        self.check(
            AlertKind::GpuTemperatureHigh,
            seen.uuid(),
            level,
            settings.temperature_for,
            now,
            || Draft {
                message: format!(
                    "{}: temperature {t:.0} °C (threshold {} °C)",
                    seen.gpu(),
                    settings.temperature_celsius
                ),
                value: Some(t),
                threshold: Some(settings.temperature_celsius),
                ..seen.base()
            },
        )
    }

    /// Low utilization matters only while a training holds the GPU.
    fn utilization_rule(&mut self, seen: &Seen, now: DateTime<Utc>) -> Option<Transition> {
        let r = seen.0;
        let settings = self.settings.clone();
        let level = match (&r.hold, r.sample.utilization_gpu_percent) {
            (None, _) => Level::Clear,
            (Some(_), None) => Level::Between,
            (Some(_), Some(u)) => below(
                u,
                settings.utilization_percent,
                settings.utilization_hysteresis_percent,
            ),
        };
        let util = r.sample.utilization_gpu_percent.unwrap_or_default();
        self.check(
            AlertKind::GpuUtilizationLow,
            seen.uuid(),
            level,
            settings.utilization_for,
            now,
            || {
                let hold = r.hold.as_ref().expect("firing only while held");
                Draft {
                    message: format!(
                        "{}: utilization {util:.0}% for {} while training {} rank {} runs on it (threshold {}%)",
                        seen.gpu(),
                        human(settings.utilization_for),
                        hold.training_id,
                        hold.rank,
                        settings.utilization_percent
                    ),
                    value: Some(util),
                    threshold: Some(settings.utilization_percent),
                    ..seen.base()
                }
            },
        )
    }

    /// New uncorrected ECC and critical XID errors.
    fn error_rules(&mut self, seen: &Seen, now: DateTime<Utc>) -> Vec<Transition> {
        let s = &seen.0.sample;
        let ecc = self.counter_rule(
            AlertKind::GpuEccUncorrected,
            seen.uuid(),
            s.ecc_errors_uncorrected,
            now,
            |new, total| Draft {
                message: format!(
                    "{}: {new} new uncorrected ECC error(s), {total} since the driver loaded",
                    seen.gpu(),
                ),
                ..seen.base()
            },
        );
        let xid = self.counter_rule(
            AlertKind::GpuXidError,
            seen.uuid(),
            s.xid_errors,
            now,
            |new, total| Draft {
                message: format!(
                    "{}: {new} new critical XID error(s){}, {total} since its agent started",
                    seen.gpu(),
                    s.last_xid
                        .map(|x| format!(" (last: XID {x})"))
                        .unwrap_or_default(),
                ),
                ..seen.base()
            },
        );
        ecc.into_iter().chain(xid).collect()
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
