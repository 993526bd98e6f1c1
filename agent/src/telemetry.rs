//! Sampling the probe from async code.

use std::sync::{Arc, Mutex};

use crate::probe::{GpuInfo, GpuProbe, GpuSample, ProbeError};

/// The probe shared between the telemetry loop and whoever assigns ranks.
pub type SharedProbe = Arc<Mutex<Box<dyn GpuProbe>>>;

pub fn share(probe: Box<dyn GpuProbe>) -> SharedProbe {
    Arc::new(Mutex::new(probe))
}

/// Runs `f` on the probe on a blocking thread (NVML calls block).
async fn with_probe<T, F>(probe: &SharedProbe, f: F) -> Result<T, ProbeError>
where
    T: Send + 'static,
    F: FnOnce(&mut dyn GpuProbe) -> Result<T, ProbeError> + Send + 'static,
{
    let probe = probe.clone();
    tokio::task::spawn_blocking(move || {
        let mut guard = probe.lock().unwrap_or_else(|e| e.into_inner());
        f(guard.as_mut())
    })
    .await
    .map_err(|e| ProbeError::Nvml {
        call: "probe task",
        reason: e.to_string(),
    })?
}

pub async fn inventory(probe: &SharedProbe) -> Result<Vec<GpuInfo>, ProbeError> {
    with_probe(probe, |p| p.inventory()).await
}

pub async fn sample(probe: &SharedProbe) -> Result<Vec<GpuSample>, ProbeError> {
    with_probe(probe, |p| p.sample()).await
}

/// Tells the probe which pids run on GPU `index` (drives simulated load).
pub fn assign(probe: &SharedProbe, index: u32, pids: &[u32]) {
    probe
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .assign(index, pids);
}
