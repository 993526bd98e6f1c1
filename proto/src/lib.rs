//! `cohort-proto`: the `cohort.v1` gRPC contract, used by the coordinator, the
//! agent and the CLI alike. Keep it slim: generated code, the descriptor set for
//! reflection, domain <-> proto conversions and the error model.
//!
//! - [`v1`]: the generated messages, clients (`*_client`) and servers (`*_server`).
//! - [`FILE_DESCRIPTOR_SET`]: every `cohort.v1` file, for tonic-reflection.
//! - [`config`]: `TryFrom<v1::TrainingConfig> for cohort_spec::TrainingConfig`
//!   (validates) and `From<&cohort_spec::TrainingConfig> for v1::TrainingConfig`.
//! - [`channel`]: a connected channel for any of the clients.
//! - [`error`]: the stable `ErrorInfo` reasons and helpers building a
//!   `tonic::Status` that carries them.

pub mod config;
pub mod error;
pub mod sweep;

/// The generated `cohort.v1` code.
pub mod v1 {
    #![allow(clippy::large_enum_variant, clippy::doc_lazy_continuation)]
    tonic::include_proto!("cohort.v1");
}

/// Opens a channel to a cohort server (e.g. `http://127.0.0.1:50051`), to
/// build any client on: `TrainingServiceClient::new(channel(url).await?)`.
///
/// The generated clients have no `connect(url)` constructor of their own: it
/// would clash with the `AgentService.Connect` RPC.
pub async fn channel(url: &str) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    tonic::transport::Endpoint::from_shared(url.to_string())?
        .connect()
        .await
}

/// The encoded `FileDescriptorSet` of every `cohort.v1` file (and the
/// well-known types they import), for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("cohort_descriptor");

/// `google/rpc/error_details.proto` (ErrorInfo, BadRequest), for reflection, so
/// clients such as grpcurl can decode the details of cohort's errors.
pub const ERROR_DETAILS_DESCRIPTOR_SET: &[u8] =
    tonic::include_file_descriptor_set!("error_details_descriptor");

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn descriptor_set_names_every_service() {
        let fds = prost_types::FileDescriptorSet::decode(FILE_DESCRIPTOR_SET).unwrap();
        let services: Vec<String> = fds
            .file
            .iter()
            .filter(|f| f.package() == "cohort.v1")
            .flat_map(|f| f.service.iter().map(|s| s.name().to_string()))
            .collect();
        for name in [
            "TrainingService",
            "GpuService",
            "TelemetryService",
            "AgentService",
            "AdminService",
        ] {
            assert!(services.iter().any(|s| s == name), "{name} in {services:?}");
        }
    }
}
