//! Signals to a rank's whole process group.

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// Sends `signal` to process group `pgid`. Returns false when the group no
/// longer exists; other failures are logged.
pub(crate) fn kill_group(pgid: u32, signal: Signal) -> bool {
    let Ok(raw) = i32::try_from(pgid) else {
        return false;
    };
    if raw <= 1 {
        // Never signal group 0 (our own) or 1; a rank's group id is its pid > 1.
        return false;
    }
    match killpg(Pid::from_raw(raw), signal) {
        Ok(()) => true,
        Err(Errno::ESRCH) => false,
        Err(e) => {
            tracing::warn!(pgid, signal = %signal, error = %e, "could not signal rank process group");
            false
        }
    }
}
