//! A process group from PyTorch's c10d (TCPStore + ProcessGroupGloo/NCCL),
//! through the C++ shim in `shim/c10d_shim.cpp`. Collectives are c10d's own.

use crate::error::RankError;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::time::Duration;
use tch::Tensor;

const ERR_LEN: usize = 4096;

extern "C" {
    fn cohort_pg_new(
        backend: *const c_char,
        master_addr: *const c_char,
        master_port: u16,
        bind_host: *const c_char,
        rank: c_int,
        world_size: c_int,
        rendezvous_timeout_ms: i64,
        collective_timeout_ms: i64,
        err: *mut c_char,
        err_len: usize,
    ) -> *mut c_void;
    fn cohort_pg_free(group: *mut c_void);
    fn cohort_pg_allreduce_sum(
        group: *mut c_void,
        tensors: *const *mut c_void,
        n: usize,
        coalesced: c_int,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    fn cohort_pg_broadcast(
        group: *mut c_void,
        tensors: *const *mut c_void,
        n: usize,
        root: c_int,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    fn cohort_pg_barrier(group: *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn cohort_pg_allreduce_start(
        group: *mut c_void,
        tensors: *const *mut c_void,
        n: usize,
        err: *mut c_char,
        err_len: usize,
    ) -> *mut c_void;
    fn cohort_pg_work_wait(work: *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
}

/// An all-reduce in flight. The tensors it reduces must stay alive, untouched,
/// until [`Pending::wait`] returns; dropping it waits.
pub struct Pending<'g> {
    work: *mut c_void,
    _group: std::marker::PhantomData<&'g ProcessGroup>,
}

impl Pending<'_> {
    /// Wait for the collective to finish.
    pub fn wait(mut self) -> Result<(), RankError> {
        self.finish()
    }

    fn finish(&mut self) -> Result<(), RankError> {
        if self.work.is_null() {
            return Ok(());
        }
        let mut err = vec![0u8; ERR_LEN];
        let rc = unsafe { cohort_pg_work_wait(self.work, err.as_mut_ptr().cast(), ERR_LEN) };
        self.work = std::ptr::null_mut();
        ProcessGroup::check(rc, &err)
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// Which c10d backend carries the collectives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Gloo,
    Nccl,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Gloo => "gloo",
            Backend::Nccl => "nccl",
        }
    }
}

pub struct GroupOptions<'a> {
    pub backend: Backend,
    pub master_addr: &'a str,
    pub master_port: u16,
    pub rank: i64,
    pub world_size: i64,
    pub rendezvous_timeout: Duration,
    pub collective_timeout: Duration,
}

/// A formed process group. Dropping it tears the group down.
pub struct ProcessGroup {
    raw: *mut c_void,
    world_size: i64,
    backend: Backend,
}

// The c10d backend is safe to use from one thread at a time; we never share it.
unsafe impl Send for ProcessGroup {}

fn cstring(what: &str, s: &str) -> Result<CString, RankError> {
    CString::new(s).map_err(|_| RankError::Launch(format!("{what} contains a NUL byte")))
}

fn message(buf: &[u8]) -> String {
    CStr::from_bytes_until_nul(buf)
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown c10d error".into())
}

/// The address gloo binds to on this host: loopback when the group lives on
/// loopback, else `COHORT_GLOO_HOST` or this host's resolved name.
fn bind_host(master_addr: &str) -> String {
    if let Ok(host) = std::env::var("COHORT_GLOO_HOST") {
        return host;
    }
    let loopback = master_addr == "localhost"
        || master_addr
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if loopback {
        "127.0.0.1".into()
    } else {
        String::new()
    }
}

impl ProcessGroup {
    /// Rendezvous through a TCPStore hosted by rank 0, then form the group.
    /// Fails with `RankError::Rendezvous` when the peers don't all arrive in time.
    pub fn join(opts: &GroupOptions<'_>) -> Result<Self, RankError> {
        let backend = cstring("backend", opts.backend.name())?;
        let addr = cstring("MASTER_ADDR", opts.master_addr)?;
        let bind = cstring("COHORT_GLOO_HOST", &bind_host(opts.master_addr))?;
        let mut err = vec![0u8; ERR_LEN];
        let raw = unsafe {
            cohort_pg_new(
                backend.as_ptr(),
                addr.as_ptr(),
                opts.master_port,
                bind.as_ptr(),
                opts.rank as c_int,
                opts.world_size as c_int,
                opts.rendezvous_timeout.as_millis() as i64,
                opts.collective_timeout.as_millis() as i64,
                err.as_mut_ptr().cast(),
                ERR_LEN,
            )
        };
        if raw.is_null() {
            return Err(RankError::Rendezvous(message(&err)));
        }
        Ok(Self {
            raw,
            world_size: opts.world_size,
            backend: opts.backend,
        })
    }

    /// `gloo` or `nccl`.
    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    pub fn world_size(&self) -> i64 {
        self.world_size
    }

    fn pointers(tensors: &mut [&mut Tensor]) -> Vec<*mut c_void> {
        tensors.iter_mut().map(|t| t.as_mut_ptr().cast()).collect()
    }

    fn check(rc: c_int, err: &[u8]) -> Result<(), RankError> {
        if rc == 0 {
            Ok(())
        } else {
            Err(RankError::PeerLost(message(err)))
        }
    }

    /// Sum each tensor in place across ranks: one coalesced collective for all
    /// of them when `coalesced`, else one collective per tensor.
    pub fn allreduce_sum(
        &self,
        tensors: &mut [&mut Tensor],
        coalesced: bool,
    ) -> Result<(), RankError> {
        let ptrs = Self::pointers(tensors);
        let mut err = vec![0u8; ERR_LEN];
        let rc = unsafe {
            cohort_pg_allreduce_sum(
                self.raw,
                ptrs.as_ptr(),
                ptrs.len(),
                coalesced as c_int,
                err.as_mut_ptr().cast(),
                ERR_LEN,
            )
        };
        Self::check(rc, &err)
    }

    /// Start summing `tensor` in place across ranks; returns at once.
    pub fn allreduce_start(&self, tensor: &mut Tensor) -> Result<Pending<'_>, RankError> {
        let ptrs = [tensor.as_mut_ptr().cast::<c_void>()];
        let mut err = vec![0u8; ERR_LEN];
        let work = unsafe {
            cohort_pg_allreduce_start(self.raw, ptrs.as_ptr(), 1, err.as_mut_ptr().cast(), ERR_LEN)
        };
        if work.is_null() {
            return Err(RankError::PeerLost(message(&err)));
        }
        Ok(Pending {
            work,
            _group: std::marker::PhantomData,
        })
    }

    /// Overwrite each tensor in place with rank `root`'s copy.
    pub fn broadcast(&self, tensors: &mut [&mut Tensor], root: i64) -> Result<(), RankError> {
        let ptrs = Self::pointers(tensors);
        let mut err = vec![0u8; ERR_LEN];
        let rc = unsafe {
            cohort_pg_broadcast(
                self.raw,
                ptrs.as_ptr(),
                ptrs.len(),
                root as c_int,
                err.as_mut_ptr().cast(),
                ERR_LEN,
            )
        };
        Self::check(rc, &err)
    }

    pub fn barrier(&self) -> Result<(), RankError> {
        let mut err = vec![0u8; ERR_LEN];
        let rc = unsafe { cohort_pg_barrier(self.raw, err.as_mut_ptr().cast(), ERR_LEN) };
        Self::check(rc, &err)
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        unsafe { cohort_pg_free(self.raw) }
    }
}
