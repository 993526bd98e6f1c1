//! Where a rank computes and which backend carries its collectives.

use crate::dist::Backend;
use crate::error::RankError;
use cohort_spec::config::{CollectiveBackend, Device as DeviceChoice};
use tch::Device;

/// Choose the device from the config and what this process can see.
pub fn select_device(choice: DeviceChoice) -> Result<Device, RankError> {
    let cuda = tch::Cuda::is_available();
    match choice {
        DeviceChoice::Cpu => Ok(Device::Cpu),
        DeviceChoice::Auto if cuda => Ok(Device::Cuda(0)),
        DeviceChoice::Auto => Ok(Device::Cpu),
        DeviceChoice::Cuda if cuda => Ok(Device::Cuda(0)),
        DeviceChoice::Cuda => Err(RankError::Launch(
            "runtime.device is \"cuda\" but this process sees no CUDA device".into(),
        )),
    }
}

/// The collectives' backend for `device` under `choice`. A rank built
/// without NCCL refuses CUDA work across several ranks unless the config
/// asks for gloo: it never silently all-reduces CUDA tensors through host
/// copies.
pub fn backend_for(
    device: Device,
    choice: CollectiveBackend,
    world_size: i64,
) -> Result<Backend, RankError> {
    let nccl = cfg!(cohort_nccl);
    match choice {
        CollectiveBackend::Gloo => Ok(Backend::Gloo),
        CollectiveBackend::Nccl if !device.is_cuda() => Err(RankError::Launch(
            "runtime.backend is \"nccl\" but the rank runs on the CPU".into(),
        )),
        CollectiveBackend::Nccl if !nccl => Err(RankError::Launch(
            "runtime.backend is \"nccl\" but this cohort-rank is built without ProcessGroupNCCL"
                .into(),
        )),
        CollectiveBackend::Nccl => Ok(Backend::Nccl),
        CollectiveBackend::Auto if device.is_cuda() && nccl => Ok(Backend::Nccl),
        CollectiveBackend::Auto if device.is_cuda() && world_size > 1 => Err(RankError::Launch(
            "this cohort-rank is built without ProcessGroupNCCL: it refuses CUDA training across \
             ranks rather than all-reduce through gloo; rebuild with NCCL (cohort-agent doctor \
             checks it) or set runtime.backend = \"gloo\""
                .into(),
        )),
        // gloo carries CPU tensors (and a lone CUDA rank has nothing to reduce).
        CollectiveBackend::Auto => Ok(Backend::Gloo),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backend_follows_the_device_and_the_choice() {
        let auto = CollectiveBackend::Auto;
        assert_eq!(backend_for(Device::Cpu, auto, 4).unwrap(), Backend::Gloo);
        assert_eq!(
            backend_for(Device::Cpu, CollectiveBackend::Gloo, 4).unwrap(),
            Backend::Gloo
        );
        assert!(backend_for(Device::Cpu, CollectiveBackend::Nccl, 2).is_err());
        assert_eq!(
            backend_for(Device::Cuda(0), CollectiveBackend::Gloo, 2).unwrap(),
            Backend::Gloo
        );
        let cuda = backend_for(Device::Cuda(0), auto, 2);
        if cfg!(cohort_nccl) {
            assert_eq!(cuda.unwrap(), Backend::Nccl);
        } else {
            let err = cuda.unwrap_err().to_string();
            assert!(err.contains("without ProcessGroupNCCL"), "{err}");
            assert_eq!(
                backend_for(Device::Cuda(0), auto, 1).unwrap(),
                Backend::Gloo
            );
        }
    }
}
