//! Critical XID errors from NVML: one event set per GPU, registered for
//! `CRITICAL_XID_ERROR` when the probe starts, drained (without waiting) at
//! every sample. A GPU whose driver can't deliver XID events (not supported,
//! no permission, a vGPU) reports none: its count stays absent, not 0.

use std::collections::HashMap;

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{EventSet, Nvml};

/// What one GPU's XID errors came to so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XidCount {
    pub errors: u64,
    pub last: Option<u32>,
}

impl XidCount {
    /// Counts one event; `code` is its XID when the driver gave one.
    pub fn record(&mut self, code: Option<u64>) {
        self.errors += 1;
        if let Some(code) = code {
            self.last = u32::try_from(code).ok();
        }
    }
}

/// The event sets of the GPUs that support XID events.
pub struct XidWatch {
    sets: HashMap<u32, EventSet<'static>>,
    counts: HashMap<u32, XidCount>,
}

impl XidWatch {
    /// Registers every GPU it can; the others are left out (logged once).
    pub fn new(nvml: &'static Nvml, count: u32) -> Self {
        let mut sets = HashMap::new();
        for index in 0..count {
            let registered = nvml.device_by_index(index).and_then(|dev| {
                let set = nvml.create_event_set()?;
                dev.register_events(EventTypes::CRITICAL_XID_ERROR, set)
                    .map_err(|e| e.error)
            });
            match registered {
                Ok(set) => {
                    sets.insert(index, set);
                }
                Err(e) => {
                    tracing::info!(gpu = index, error = %e, "XID events unavailable for this GPU")
                }
            }
        }
        Self {
            counts: sets.keys().map(|&i| (i, XidCount::default())).collect(),
            sets,
        }
    }

    /// Takes the events that arrived since the last call; `None` for a GPU
    /// without XID events.
    pub fn poll(&mut self, index: u32) -> Option<XidCount> {
        let set = self.sets.get(&index)?;
        let count = self.counts.entry(index).or_default();
        loop {
            match set.wait(0) {
                Ok(event) if event.event_type.contains(EventTypes::CRITICAL_XID_ERROR) => {
                    let code = match event.event_data {
                        Some(XidError::Value(code)) => Some(code),
                        _ => None,
                    };
                    tracing::warn!(gpu = index, xid = ?code, "critical XID error");
                    count.record(code);
                }
                Ok(_) => {}
                Err(NvmlError::Timeout) => break,
                Err(e) => {
                    tracing::debug!(gpu = index, error = %e, "reading XID events failed");
                    break;
                }
            }
        }
        Some(*count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_every_event_and_keeps_the_newest_code() {
        let mut c = XidCount::default();
        c.record(Some(79));
        c.record(None);
        assert_eq!(
            c,
            XidCount {
                errors: 2,
                last: Some(79)
            }
        );
        c.record(Some(48));
        assert_eq!(c.last, Some(48));
        assert_eq!(c.errors, 3);
    }
}
