//! `runtime.nccl_env`: the NCCL variables a training may set for its ranks
//! (on GPUs; gloo on CPU ignores them). An allowlist, so a config can tune
//! the interconnect but not point NCCL at files or plugins of its choosing.

/// The variables `runtime.nccl_env` may set, with what they are for
/// (docs/rank.md).
pub const ALLOWED: &[&str] = &[
    // Which network: the interface for sockets, the InfiniBand HCAs, GID.
    "NCCL_SOCKET_IFNAME",
    "NCCL_IB_HCA",
    "NCCL_IB_DISABLE",
    "NCCL_IB_GID_INDEX",
    "NCCL_IB_TIMEOUT",
    "NCCL_NET_GDR_LEVEL",
    "NCCL_CROSS_NIC",
    // Within a host: peer-to-peer over NVLink/PCIe, shared memory.
    "NCCL_P2P_DISABLE",
    "NCCL_P2P_LEVEL",
    "NCCL_SHM_DISABLE",
    // How collectives run.
    "NCCL_ALGO",
    "NCCL_PROTO",
    "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_NCHANNELS",
    "NCCL_BUFFSIZE",
    "NCCL_NSOCKS_PERTHREAD",
    "NCCL_SOCKET_NTHREADS",
    // Diagnostics.
    "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS",
];

/// Longest value accepted.
pub const MAX_VALUE: usize = 256;

/// Why `name=value` may not be set, if it may not.
pub fn refusal(name: &str, value: &str) -> Option<String> {
    if !ALLOWED.contains(&name) {
        return Some(format!(
            "{name} is not one of the NCCL variables a training may set ({})",
            ALLOWED.join(", ")
        ));
    }
    if value.is_empty() || value.len() > MAX_VALUE {
        return Some(format!("the value is 1 to {MAX_VALUE} characters"));
    }
    if value.chars().any(|c| c.is_control()) {
        return Some("the value holds control characters".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_names_with_plain_values_only() {
        assert_eq!(refusal("NCCL_SOCKET_IFNAME", "eth0"), None);
        assert_eq!(refusal("NCCL_IB_HCA", "mlx5_0:1,mlx5_1:1"), None);
        assert!(refusal("NCCL_NET_PLUGIN", "/tmp/evil.so")
            .unwrap()
            .contains("not one of"));
        assert!(refusal("LD_PRELOAD", "x").is_some());
        assert!(refusal("NCCL_DEBUG", "").is_some());
        assert!(refusal("NCCL_DEBUG", "INFO\n").is_some());
    }
}
