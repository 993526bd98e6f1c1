//! How a domain error says what a client sees: one trait (as quickwit's
//! `ServiceError`), so a service's one error table turns any domain error
//! into a `tonic::Status` with [`ServiceError::to_status`], and no domain
//! module needs to know the others.

use super::{status, Reason};
use tonic::{Code, Status};

/// `ErrorInfo.metadata`: what a client needs to act on the error.
pub type Metadata = Vec<(String, String)>;

/// A domain error as the gRPC error model shows it.
pub trait ServiceError: std::error::Error {
    /// The gRPC status code.
    fn code(&self) -> Code;

    /// The stable `ErrorInfo.reason`.
    fn reason(&self) -> Reason;

    /// The `ErrorInfo.metadata`.
    fn metadata(&self) -> Metadata {
        Vec::new()
    }

    /// The message the client reads: the error's own words unless they
    /// would leak server internals.
    fn client_message(&self) -> String {
        self.to_string()
    }

    /// Records, once, what the server should keep of it (a fault's
    /// internals, a suspicious request). Nothing by default.
    fn log(&self) {}

    /// The status a client gets.
    fn to_status(&self) -> Status {
        self.log();
        status(
            self.code(),
            self.reason(),
            self.client_message(),
            self.metadata(),
        )
    }
}

/// Metadata from `(key, value)` pairs.
pub fn metadata<const N: usize>(pairs: [(&str, String); N]) -> Metadata {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::reason_of;

    #[derive(Debug, thiserror::Error)]
    #[error("gpu {0} is busy")]
    struct Busy(String);

    impl ServiceError for Busy {
        fn code(&self) -> Code {
            Code::FailedPrecondition
        }
        fn reason(&self) -> Reason {
            Reason::GpuBusy
        }
        fn metadata(&self) -> Metadata {
            metadata([("gpu", self.0.clone())])
        }
    }

    #[test]
    fn a_service_error_becomes_its_status() {
        let s = Busy("GPU-1".into()).to_status();
        assert_eq!(s.code(), Code::FailedPrecondition);
        assert_eq!(s.message(), "gpu GPU-1 is busy");
        assert_eq!(reason_of(&s), Some(Reason::GpuBusy));
    }
}
