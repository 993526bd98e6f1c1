//! Where rank processes are forked: one thread that lives as long as the
//! agent, so that the parent-death signal each rank asks for fires when the
//! agent dies (SIGKILL included) and never earlier.
//!
//! Linux delivers `PR_SET_PDEATHSIG` when the *thread* that forked the child
//! exits, not the process. A rank forked from a tokio blocking-pool thread
//! (which exits after 10 s idle) or from a worker that later leaves the
//! runtime would be killed at a random time; one forked from this thread is
//! killed exactly when the agent is. Each request carries the caller's
//! runtime handle, so the child is reaped by the runtime that awaits it.

use std::io;
use std::sync::mpsc as std_mpsc;
use std::sync::{Mutex, OnceLock};
use tokio::process::{Child, Command};
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// The signal a rank gets when its agent dies.
const PARENT_DEATH_SIGNAL: libc::c_int = libc::SIGKILL;

struct Request {
    command: Command,
    runtime: Handle,
    reply: oneshot::Sender<io::Result<Child>>,
}

/// The spawning thread's queue; the thread is started on first use and the
/// sender is never dropped, so the thread never exits.
fn queue() -> &'static Mutex<std_mpsc::Sender<Request>> {
    static QUEUE: OnceLock<Mutex<std_mpsc::Sender<Request>>> = OnceLock::new();
    QUEUE.get_or_init(|| {
        let (tx, rx) = std_mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("rank-spawner".into())
            .spawn(move || {
                for mut request in rx {
                    let _entered = request.runtime.enter();
                    let child = spawn_retrying_busy(&mut request.command);
                    // A caller that went away drops its child (kill_on_drop).
                    let _ = request.reply.send(child);
                }
            })
            .expect("cannot start the rank-spawner thread");
        Mutex::new(tx)
    })
}

/// How often a busy executable (ETXTBSY) is retried.
const SPAWN_BUSY_RETRIES: u64 = 5;

/// Spawns, retrying briefly on ETXTBSY: a program that was just written (a
/// fresh build, a test script) can be busy while another thread's fork still
/// holds its write descriptor.
fn spawn_retrying_busy(command: &mut Command) -> io::Result<Child> {
    let mut attempt = 0;
    loop {
        match command.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && attempt < SPAWN_BUSY_RETRIES => {
                attempt += 1;
                std::thread::sleep(std::time::Duration::from_millis(10 * attempt));
            }
            other => return other,
        }
    }
}

/// Asks the kernel to SIGKILL the child when the agent dies, and exits at
/// once if the agent died between fork and this call. Runs in the child
/// between fork and exec, so it may only make async-signal-safe calls.
fn die_with(command: &mut Command, agent_pid: libc::pid_t) {
    // SAFETY: prctl, getppid and _exit are async-signal-safe; nothing is
    // allocated or locked in the child.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, PARENT_DEATH_SIGNAL, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() != agent_pid {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

/// Forks and execs `command` on the spawning thread, with the parent-death
/// signal set. Must be called inside a tokio runtime.
pub(crate) async fn spawn(mut command: Command) -> io::Result<Child> {
    // SAFETY: getpid has no preconditions.
    die_with(&mut command, unsafe { libc::getpid() });
    let (reply, answer) = oneshot::channel();
    let request = Request {
        command,
        runtime: Handle::current(),
        reply,
    };
    queue()
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .send(request)
        .map_err(|_| io::Error::other("the rank-spawner thread is gone"))?;
    answer
        .await
        .map_err(|_| io::Error::other("the rank-spawner thread dropped the request"))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A child forked from a short-lived thread still runs after that thread
    /// exits: the signal is tied to the spawner, not the caller.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_child_outlives_the_thread_that_asked_for_it() {
        let child = tokio::task::spawn_blocking(|| {
            Handle::current().block_on(async {
                let mut command = Command::new("sleep");
                command.arg("30").kill_on_drop(true);
                spawn(command).await.expect("spawn sleep")
            })
        })
        .await
        .unwrap();
        // The blocking thread that asked is done; give the kernel a moment.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut child = child;
        assert!(child.try_wait().unwrap().is_none(), "the child was killed");
        let pid = child.id().unwrap();
        let status = tokio::fs::read_to_string(format!("/proc/{pid}/status"))
            .await
            .unwrap();
        let parent = status.lines().find(|l| l.starts_with("PPid:")).unwrap();
        assert!(
            parent.ends_with(&std::process::id().to_string()),
            "{parent}"
        );
        child.kill().await.unwrap();
    }
}
