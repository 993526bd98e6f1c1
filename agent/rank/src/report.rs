//! Progress lines on stdout (the agent parses them; see `cohort_spec::progress`)
//! and what a rank knows about its own memory.

use cohort_spec::progress::ProgressLine;
use std::io::Write;

pub struct Reporter {
    rank: i64,
}

impl Reporter {
    pub fn new(rank: i64) -> Self {
        Self { rank }
    }

    /// Emit a line from this rank.
    pub fn emit(&self, line: &ProgressLine) {
        let mut out = std::io::stdout().lock();
        // A closed stdout (the agent went away) must not kill training.
        let _ = writeln!(out, "{}", line.to_line());
        let _ = out.flush();
    }

    /// Emit a job-level line: rank 0 only.
    pub fn leader(&self, line: &ProgressLine) {
        if self.rank == 0 {
            self.emit(line);
        }
    }
}

extern "C" {
    fn cohort_cuda_allocated_bytes(device: std::ffi::c_int) -> i64;
}

/// What `rank_stats.memory_bytes` reports on `device`: the CUDA caching
/// allocator's bytes held for tensors on a GPU, the host RSS on a CPU (or
/// where the allocator can't say); with its kind.
pub fn device_memory(device: tch::Device) -> (u64, &'static str) {
    if let tch::Device::Cuda(index) = device {
        let bytes = unsafe { cohort_cuda_allocated_bytes(index as std::ffi::c_int) };
        if let Ok(bytes) = u64::try_from(bytes) {
            return (bytes, "cuda_allocated");
        }
    }
    (resident_bytes(), "host_rss")
}

/// Resident set size of this process, in bytes (0 where /proc is unavailable).
pub fn resident_bytes() -> u64 {
    let Ok(statm) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * page.max(0) as u64
}
