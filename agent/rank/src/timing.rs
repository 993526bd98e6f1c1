//! How long a collective took. On the CPU the host clock is the truth. On
//! CUDA a collective returns once it is queued, so the host clock would
//! show ~0 ms and its time would land in compute: there a span is two CUDA
//! events on the current stream, read when the later one has completed.
//! Then `compute + comm + data_wait = step` holds on a GPU as on the CPU
//! (compute is the step's host time minus the other two, and the step ends
//! with a device sync).

use std::ffi::{c_int, c_void};
use std::time::{Duration, Instant};
use tch::Device;

extern "C" {
    fn cohort_cuda_event_record(device: c_int) -> *mut c_void;
    fn cohort_cuda_event_elapsed_ms(start: *mut c_void, end: *mut c_void) -> f64;
    fn cohort_cuda_event_free(event: *mut c_void);
}

/// A CUDA event (freed on drop); null where the build has no CUDA.
struct Event(*mut c_void);

impl Event {
    fn record(device: usize) -> Event {
        // SAFETY: records on the current stream of a device index this
        // process uses; a null return is handled.
        Event(unsafe { cohort_cuda_event_record(device as c_int) })
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: allocated by cohort_cuda_event_record, freed once.
            unsafe { cohort_cuda_event_free(self.0) }
        }
    }
}

/// A span begun before a collective.
pub struct Span {
    host: Instant,
    cuda: Option<(usize, Event)>,
}

impl Span {
    /// Begins a span on `device`.
    pub fn begin(device: Device) -> Span {
        let cuda = match device {
            Device::Cuda(index) => Some((index, Event::record(index))),
            _ => None,
        };
        Span {
            host: Instant::now(),
            cuda,
        }
    }

    /// Ends it: the device's time between the two events on CUDA (waiting
    /// for the collective to finish), the host's elsewhere — or when the
    /// device cannot say.
    pub fn end(self) -> Duration {
        let host = self.host.elapsed();
        let Some((index, start)) = self.cuda else {
            return host;
        };
        let end = Event::record(index);
        // SAFETY: both events were recorded by this process (or are null,
        // which the shim answers with -1).
        let ms = unsafe { cohort_cuda_event_elapsed_ms(start.0, end.0) };
        if ms >= 0.0 && ms.is_finite() {
            Duration::from_secs_f64(ms / 1e3)
        } else {
            host
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_the_cpu_a_span_is_host_time() {
        let span = Span::begin(Device::Cpu);
        std::thread::sleep(Duration::from_millis(20));
        let took = span.end();
        assert!(
            took >= Duration::from_millis(20) && took < Duration::from_secs(2),
            "{took:?}"
        );
    }
}
