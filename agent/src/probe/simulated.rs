//! Simulated GPUs for machines without one. Values move smoothly towards targets
//! set by the load (rank processes the agent runs on the GPU), with a little
//! deterministic jitter; tests can pin any field with an override. Every
//! inventory entry and sample says `simulated: true`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::types::now_ms;
use super::{
    ComputeCapability, GpuInfo, GpuProbe, GpuProcess, GpuSample, OverrideFile, ProbeError, SimSpec,
};

const POWER_LIMIT_W: f64 = 300.0;
const AMBIENT_C: f64 = 33.0;
const LOADED_C: f64 = 74.0;
const IDLE_SM_MHZ: f64 = 210.0;
const MAX_SM_MHZ: f64 = 1755.0;
const IDLE_MEM_MHZ: f64 = 405.0;
const MAX_MEM_MHZ: f64 = 1593.0;
const IDLE_MEMORY_BYTES: f64 = 450.0 * 1024.0 * 1024.0;
/// Share of the memory a training process occupies.
const LOADED_MEMORY_SHARE: f64 = 0.62;

/// A telemetry field a test can pin with [`SimControls::set_override`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SimField {
    UtilizationGpu,
    UtilizationMemory,
    TemperatureC,
    PowerDrawW,
    MemoryUsedBytes,
    SmClockMhz,
    MemoryClockMhz,
    EccCorrected,
    EccUncorrected,
    /// Critical XID errors so far (a count) and the newest one's code.
    XidErrors,
    LastXid,
    /// A process cohort did not start, using the GPU: the value is its pid
    /// (it holds the memory above the idle base that no rank holds).
    ForeignPid,
}

type Overrides = HashMap<(u32, SimField), f64>;

/// A cloneable handle that pins simulated values, e.g. to script a hot GPU
/// or a full memory in alert tests. Overrides apply from the next sample on.
#[derive(Debug, Clone, Default)]
pub struct SimControls {
    overrides: Arc<Mutex<Overrides>>,
}

impl SimControls {
    /// Pins `field` of GPU `index` to `value` (in the field's unit: percent,
    /// degrees C, watts, bytes, MHz, a count).
    pub fn set_override(&self, index: u32, field: SimField, value: f64) {
        self.lock().insert((index, field), value);
    }

    /// Lets `field` of GPU `index` follow the simulation again.
    pub fn clear_override(&self, index: u32, field: SimField) {
        self.lock().remove(&(index, field));
    }

    /// Removes every override.
    pub fn clear_all(&self) {
        self.lock().clear();
    }

    /// The scripted foreign process of GPU `index`, if any.
    fn foreign_pid(&self, index: u32) -> Option<u32> {
        self.get(index, SimField::ForeignPid)
            .filter(|pid| *pid >= 1.0 && *pid <= f64::from(u32::MAX))
            .map(|pid| pid as u32)
    }

    fn get(&self, index: u32, field: SimField) -> Option<f64> {
        self.lock().get(&(index, field)).copied()
    }

    fn lock(&self) -> MutexGuard<'_, Overrides> {
        // A panic while holding this lock leaves a plain map behind: still usable.
        self.overrides.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The evolving state of one simulated GPU.
#[derive(Debug, Clone)]
struct SimGpu {
    info: GpuInfo,
    pids: Vec<u32>,
    utilization: f64,
    memory_utilization: f64,
    temperature: f64,
    power: f64,
    sm_clock: f64,
    memory_clock: f64,
    memory_used: f64,
    /// Per-GPU offset so GPUs don't read identically (degrees C).
    temperature_offset: f64,
    rng: u64,
}

impl SimGpu {
    fn new(info: GpuInfo) -> Self {
        let mut rng = fnv1a(info.uuid.as_bytes());
        let temperature_offset = unit_noise(&mut rng) * 2.5;
        Self {
            info,
            pids: Vec::new(),
            utilization: 0.0,
            memory_utilization: 0.0,
            temperature: AMBIENT_C + temperature_offset,
            power: POWER_LIMIT_W * 0.12,
            sm_clock: IDLE_SM_MHZ,
            memory_clock: IDLE_MEM_MHZ,
            memory_used: IDLE_MEMORY_BYTES,
            temperature_offset,
            rng,
        }
    }

    fn load(&self) -> f64 {
        if self.pids.is_empty() {
            0.0
        } else {
            1.0
        }
    }

    /// Moves every value towards its target for the current load over `dt`.
    fn advance(&mut self, dt: Duration) {
        let dt = dt.as_secs_f64();
        let load = self.load();
        let total = self.info.memory_total_bytes as f64;
        approach(&mut self.utilization, 96.0 * load, dt, 1.5);
        approach(&mut self.memory_utilization, 55.0 * load, dt, 1.5);
        approach(
            &mut self.power,
            POWER_LIMIT_W * (0.12 + 0.75 * load),
            dt,
            3.0,
        );
        approach(
            &mut self.temperature,
            AMBIENT_C + self.temperature_offset + (LOADED_C - AMBIENT_C) * load,
            dt,
            25.0,
        );
        approach(
            &mut self.sm_clock,
            IDLE_SM_MHZ + (MAX_SM_MHZ - IDLE_SM_MHZ) * load,
            dt,
            0.5,
        );
        approach(
            &mut self.memory_clock,
            IDLE_MEM_MHZ + (MAX_MEM_MHZ - IDLE_MEM_MHZ) * load,
            dt,
            0.5,
        );
        approach(
            &mut self.memory_used,
            IDLE_MEMORY_BYTES + LOADED_MEMORY_SHARE * total * load,
            dt,
            4.0,
        );
    }

    fn sample(&mut self, controls: &SimControls) -> GpuSample {
        let index = self.info.index;
        let load = self.load();
        let total = self.info.memory_total_bytes as f64;
        let pinned = |field: SimField, value: f64| controls.get(index, field).unwrap_or(value);

        let utilization = self.utilization + load * 2.0 * unit_noise(&mut self.rng);
        let memory_utilization = self.memory_utilization + load * 3.0 * unit_noise(&mut self.rng);
        let temperature = self.temperature + 0.4 * unit_noise(&mut self.rng);
        let power = self.power * (1.0 + 0.02 * unit_noise(&mut self.rng));
        let memory_used = pinned(SimField::MemoryUsedBytes, self.memory_used).clamp(0.0, total);
        let processes = self.processes(memory_used, controls.foreign_pid(index));

        GpuSample {
            index,
            uuid: self.info.uuid.clone(),
            timestamp_ms: now_ms(),
            memory_used_bytes: memory_used as u64,
            memory_total_bytes: self.info.memory_total_bytes,
            utilization_gpu_pct: Some(percent(pinned(SimField::UtilizationGpu, utilization))),
            utilization_memory_pct: Some(percent(pinned(
                SimField::UtilizationMemory,
                memory_utilization,
            ))),
            temperature_c: Some(non_negative(pinned(SimField::TemperatureC, temperature)) as u32),
            power_draw_w: Some(round1(pinned(SimField::PowerDrawW, power).max(0.0))),
            power_limit_w: Some(POWER_LIMIT_W),
            sm_clock_mhz: Some(non_negative(pinned(SimField::SmClockMhz, self.sm_clock)) as u32),
            memory_clock_mhz: Some(
                non_negative(pinned(SimField::MemoryClockMhz, self.memory_clock)) as u32,
            ),
            ecc_corrected: Some(non_negative(pinned(SimField::EccCorrected, 0.0)) as u64),
            ecc_uncorrected: Some(non_negative(pinned(SimField::EccUncorrected, 0.0)) as u64),
            throttle_reasons: Some(self.throttle_reasons(load)),
            xid_errors: Some(non_negative(pinned(SimField::XidErrors, 0.0)) as u64),
            last_xid: controls
                .get(index, SimField::LastXid)
                .map(|v| non_negative(v) as u32),
            processes,
            simulated: true,
        }
    }

    /// The assigned rank processes and the scripted foreign one, sharing the
    /// used memory beyond the idle base.
    fn processes(&self, memory_used: f64, foreign: Option<u32>) -> Vec<GpuProcess> {
        let users = self.pids.len() + usize::from(foreign.is_some());
        if users == 0 {
            return Vec::new();
        }
        let share = ((memory_used - IDLE_MEMORY_BYTES).max(0.0) / users as f64) as u64;
        let process = |pid, cohort_rank| GpuProcess {
            pid,
            used_memory_bytes: Some(share),
            cohort_rank,
        };
        self.pids
            .iter()
            .map(|&pid| process(pid, true))
            .chain(foreign.map(|pid| process(pid, false)))
            .collect()
    }

    fn throttle_reasons(&self, load: f64) -> Vec<String> {
        if load == 0.0 {
            vec!["gpu_idle".to_string()]
        } else {
            Vec::new()
        }
    }
}

/// Simulated GPUs: `GPU-SIM-<agent>-<i>` uuids, smoothly changing values.
pub struct SimulatedProbe {
    gpus: Vec<SimGpu>,
    controls: SimControls,
    last: Instant,
    override_file: Option<OverrideFile>,
}

impl SimulatedProbe {
    /// `spec.count` GPUs of `spec.memory_bytes` each; uuids derive from
    /// `agent_name` and the index, so they are stable across restarts.
    pub fn new(agent_name: &str, spec: &SimSpec) -> Self {
        let gib = spec.memory_bytes as f64 / (1u64 << 30) as f64;
        let gpus = (0..spec.count)
            .map(|index| {
                SimGpu::new(GpuInfo {
                    index,
                    uuid: sim_uuid(agent_name, index),
                    name: format!("cohort simulated gpu ({gib:.0} GiB)"),
                    memory_total_bytes: spec.memory_bytes,
                    compute_capability: Some(ComputeCapability { major: 8, minor: 0 }),
                    power_limit_w: Some(POWER_LIMIT_W),
                    simulated: true,
                })
            })
            .collect();
        Self {
            gpus,
            controls: SimControls::default(),
            last: Instant::now(),
            override_file: None,
        }
    }

    /// Reads overrides from `path` before every sample (see
    /// [`OverrideFile`](super::OverrideFile) for the format).
    pub fn with_override_file(mut self, path: &std::path::Path) -> Self {
        self.override_file = Some(OverrideFile::new(path));
        self
    }

    /// A handle to pin values; clones share the same overrides.
    pub fn controls(&self) -> SimControls {
        self.controls.clone()
    }

    /// Shorthand for `controls().set_override(...)`.
    pub fn set_override(&self, index: u32, field: SimField, value: f64) {
        self.controls.set_override(index, field, value);
    }

    /// Advances simulated time by `dt` without waiting (for tests).
    pub fn advance(&mut self, dt: Duration) {
        for gpu in &mut self.gpus {
            gpu.advance(dt);
        }
    }

    fn gpu_mut(&mut self, index: u32) -> Option<&mut SimGpu> {
        self.gpus.get_mut(index as usize)
    }
}

impl GpuProbe for SimulatedProbe {
    fn inventory(&self) -> Result<Vec<GpuInfo>, ProbeError> {
        Ok(self.gpus.iter().map(|g| g.info.clone()).collect())
    }

    fn sample(&mut self) -> Result<Vec<GpuSample>, ProbeError> {
        let now = Instant::now();
        let dt = now.duration_since(self.last);
        self.last = now;
        self.advance(dt);
        let controls = self.controls.clone();
        if let Some(file) = &mut self.override_file {
            file.refresh(&controls);
        }
        Ok(self.gpus.iter_mut().map(|g| g.sample(&controls)).collect())
    }

    fn processes(&self, index: u32) -> Result<Vec<GpuProcess>, ProbeError> {
        let gpu = self.gpus.get(index as usize).ok_or(ProbeError::NoSuchGpu {
            index,
            count: self.gpus.len() as u32,
        })?;
        Ok(gpu.processes(gpu.memory_used, self.controls.foreign_pid(index)))
    }

    fn assign(&mut self, index: u32, pids: &[u32]) {
        if let Some(gpu) = self.gpu_mut(index) {
            gpu.pids = pids.to_vec();
        }
    }

    fn is_simulated(&self) -> bool {
        true
    }
}

/// The stable uuid of simulated GPU `index` on agent `agent_name`.
pub fn sim_uuid(agent_name: &str, index: u32) -> String {
    let name: String = agent_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("GPU-SIM-{name}-{index}")
}

/// Exponential approach of `value` to `target` with time constant `tau` seconds.
fn approach(value: &mut f64, target: f64, dt: f64, tau: f64) {
    let k = 1.0 - (-dt / tau).exp();
    *value += (target - *value) * k;
}

fn percent(v: f64) -> u32 {
    v.clamp(0.0, 100.0).round() as u32
}

fn non_negative(v: f64) -> f64 {
    v.max(0.0).round()
}

fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Deterministic noise in [-1, 1] (xorshift64*).
fn unit_noise(state: &mut u64) -> f64 {
    let mut x = *state | 1;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11;
    (r as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
}
