//! The preemption notice, as the rank hears it: SIGUSR1 from its agent
//! (after `COHORT_PREEMPTED=1` was written to `COHORT_NOTICE_FILE`). The
//! handler only sets a flag; every step sums the flags of all ranks in the
//! step's own all-reduce, so the whole gang stops after the same step
//! whichever rank heard it first, rank 0 checkpoints, and every rank exits
//! PREEMPTED (16). SIGTERM stays what it was: a plain stop.

use std::sync::atomic::{AtomicBool, Ordering};

static NOTICED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_notice(_: libc::c_int) {
    NOTICED.store(true, Ordering::Relaxed);
}

/// Installs the SIGUSR1 handler (SA_RESTART: a collective's socket call is
/// not interrupted). Call it first thing: SIGUSR1's default action ends
/// the process.
pub fn install() -> std::io::Result<()> {
    // SAFETY: a zeroed sigaction is a valid starting point; the handler
    // only stores to an atomic, which is async-signal-safe.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_notice as extern "C" fn(libc::c_int) as usize;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Reads the notice file (`COHORT_NOTICE_FILE`) once: a notice given
/// before [`install`] ran found SIGUSR1 ignored (the agent starts the rank
/// so), and the agent writes the file before it signals. Call it right
/// after [`install`].
pub fn catch_up() {
    let Some(file) = std::env::var_os(cohort_spec::launch::NOTICE_FILE) else {
        return;
    };
    if std::fs::read_to_string(file).is_ok_and(|text| {
        text.lines()
            .any(|l| l.trim() == cohort_spec::launch::PREEMPTED_LINE)
    }) {
        notice();
    }
}

/// Whether this rank heard a notice.
pub fn noticed() -> bool {
    NOTICED.load(Ordering::Relaxed)
}

/// A notice as if one came (the fault injection of
/// `COHORT_FAULT_PREEMPT_AT_STEP`).
pub fn notice() {
    NOTICED.store(true, Ordering::Relaxed);
}
