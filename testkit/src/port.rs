//! Ports for servers a test starts. A port picked by binding port 0 and
//! closing the socket again can be taken by anything before the server
//! binds it; a [`PortLease`] keeps it bound instead, and hands the bound
//! socket itself to a server that can take one (`cohort-coordinator
//! --listen-fd`), so no moment passes with the port free.

use std::net::TcpListener;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// A listening socket on 127.0.0.1, held for a server to come.
pub struct PortLease {
    listener: TcpListener,
    port: u16,
}

impl PortLease {
    /// A fresh port.
    pub fn new() -> PortLease {
        Self::on(0).expect("binding a free port on 127.0.0.1")
    }

    /// `port` itself (a server restarted where it was), if it is free.
    pub fn on(port: u16) -> std::io::Result<PortLease> {
        let listener = TcpListener::bind(("127.0.0.1", port))?;
        let port = listener.local_addr()?.port();
        Ok(PortLease { listener, port })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Makes `command`'s child inherit the bound socket as file descriptor
    /// `fd` (3 or more); the lease must live until the child is spawned,
    /// and is dropped after, so that the child holds the only copy (a
    /// connection to a server that died is then refused, not queued).
    pub fn pass_to(&self, command: &mut Command, fd: RawFd) {
        assert!(fd > 2, "descriptors 0-2 are the child's stdio");
        let from = self.listener.as_raw_fd();
        // SAFETY: only async-signal-safe calls (dup2, fcntl) between fork
        // and exec.
        unsafe {
            command.pre_exec(move || {
                if from == fd {
                    // Already there: only clear close-on-exec.
                    if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                } else if libc::dup2(from, fd) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }

    /// Frees the port for a server that binds it itself (moto, the c10d
    /// store of rank 0), to be called right before it starts. Between the
    /// two, another process could take the port: hand the socket over
    /// ([`PortLease::pass_to`]) wherever the server can take one, or use
    /// [`free_port`], which picks outside the kernel's ephemeral range.
    pub fn release(self) -> u16 {
        self.port
    }
}

impl Default for PortLease {
    fn default() -> Self {
        Self::new()
    }
}

/// Where [`free_port`] picks from: below the kernel's ephemeral range
/// (32768-60999 by default, where every bind of port 0 and every outgoing
/// connection takes its port) and below the coordinator's MASTER_PORT
/// range (29500-29999), so that nothing else on the machine takes the port
/// between its release and the server's bind.
const PICKED: std::ops::Range<u16> = 20_000..29_500;

/// A port for a server that binds it itself (see [`PortLease::release`]):
/// a free one of [`PICKED`] at random, never the same twice in a process
/// (a port of the ephemeral range, from binding port 0, if none is free).
pub fn free_port() -> u16 {
    use std::collections::hash_map::RandomState;
    use std::hash::BuildHasher;
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let random = RandomState::new();
    let span = u64::from(PICKED.end - PICKED.start);
    for attempt in 0u64..1_000 {
        let port = PICKED.start + (random.hash_one(attempt) % span) as u16;
        if given.contains(&port) || TcpListener::bind(("127.0.0.1", port)).is_err() {
            continue;
        }
        given.push(port);
        return port;
    }
    PortLease::new().release()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// The tests here bind port 0 too: run one at a time, so that one's
    /// fresh port is never the port the other just released (the kernel
    /// may hand it out again at once).
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

    #[test]
    fn a_lease_holds_its_port_until_released() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let lease = PortLease::new();
        let port = lease.port();
        assert!(TcpListener::bind(("127.0.0.1", port)).is_err(), "held");
        assert_eq!(lease.release(), port);
        assert!(TcpListener::bind(("127.0.0.1", port)).is_ok(), "free");
    }

    #[test]
    fn free_ports_are_outside_the_ephemeral_range_and_never_repeat() {
        let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
        assert!(ports.iter().all(|p| PICKED.contains(p)), "{ports:?}");
        let mut distinct = ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
    }

    #[test]
    fn a_child_inherits_the_bound_socket() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let lease = PortLease::new();
        let mut command = Command::new("sh");
        // The child sees a socket on descriptor 5 (as /proc lists it).
        command.args(["-c", "readlink /proc/self/fd/5"]);
        lease.pass_to(&mut command, 5);
        let out = command.output().unwrap();
        drop(lease);
        let link = String::from_utf8_lossy(&out.stdout);
        assert!(link.starts_with("socket:"), "{link:?}");
    }
}
