//! Every way a `cohort` command can fail, in human words, and the exit code of each.
//!
//! gRPC failures are described from their `google.rpc.ErrorInfo` reason (the
//! stable contract of `cohort.v1`, see `common.proto`) and `BadRequest` field
//! violations; the status code decides the exit code.

use cohort_proto::error::Reason;
use cohort_spec::ConfigError;
use serde_json::{json, Value};
use tonic::{Code, Status};
use tonic_types::StatusExt;

/// Process exit codes. Scripts depend on them: extend, never renumber.
pub mod exit {
    /// Everything went as asked (a watched training SUCCEEDED).
    pub const OK: u8 = 0;
    /// Any failure without a more precise code (e.g. a server-side error).
    pub const GENERIC: u8 = 1;
    /// The command line is wrong (clap uses this code too).
    pub const USAGE: u8 = 2;
    /// The training, GPU or agent named does not exist.
    pub const NOT_FOUND: u8 = 3;
    /// The request or the config is invalid.
    pub const INVALID: u8 = 4;
    /// The coordinator cannot be reached or is unavailable.
    pub const UNAVAILABLE: u8 = 5;
    /// The request is valid but not possible now (GPU busy, not enough GPUs,
    /// a verb not allowed in the training's state, a reused request id).
    pub const REFUSED: u8 = 6;
    /// A watched training ended FAILED.
    pub const TRAINING_FAILED: u8 = 7;
    /// A watched training ended CANCELLED.
    pub const TRAINING_CANCELLED: u8 = 8;
    /// Not authenticated (no token, or a revoked or expired one) or not
    /// allowed (the token's role or team does not cover the request).
    pub const DENIED: u8 = 9;
    /// Interrupted by Ctrl-C (128 + SIGINT, as shells report it).
    pub const INTERRUPTED: u8 = 130;
}

/// A failed command.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The coordinator address is not a usable URL.
    #[error("invalid coordinator address {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    /// No connection could be made.
    #[error("cannot reach the coordinator at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    /// The coordinator answered with an error.
    #[error("{}", describe_status(.0))]
    Rpc(Box<Status>),
    /// The local config file could not be read or is invalid.
    #[error("{}", describe_config_error(.0))]
    Config(ConfigError),
    /// A watched training ended in a state other than SUCCEEDED.
    #[error("training {id} ended {state}{}", reason_suffix(.reason))]
    TrainingEnded {
        id: String,
        state: String,
        reason: String,
        code: u8,
    },
    /// A watch stream ended before its training did.
    #[error("the stream of training {id} closed while it was {state}; watch again to follow it")]
    WatchInterrupted { id: String, state: String },
    /// A watch gave up reconnecting to a coordinator that went away.
    #[error("lost the coordinator for {seconds} s: {reason}; {hint}")]
    LostCoordinator {
        seconds: u64,
        reason: String,
        hint: String,
    },
    /// Ctrl-C.
    #[error("interrupted; {hint}")]
    Interrupted { hint: String },
    /// A flag combination clap cannot check.
    #[error("{0}")]
    Usage(String),
    /// The command printed its own findings; exit with this code, print nothing.
    #[error("exit code {0}")]
    Silent(u8),
    /// Writing to stdout failed (other than a closed pipe).
    #[error("cannot write the output: {0}")]
    Output(std::io::Error),
    /// stdout was closed by its reader (e.g. `| head`): stop quietly.
    #[error("output closed")]
    BrokenPipe,
    /// A downloaded file could not be written, or the stream was malformed.
    #[error("{path}: {reason}")]
    Download { path: String, reason: String },
    /// A file the command writes (an export) could not be written.
    #[error("{path}: {reason}")]
    WriteFile { path: String, reason: String },
}

impl From<Status> for CliError {
    fn from(status: Status) -> Self {
        CliError::Rpc(Box::new(status))
    }
}

impl From<std::io::Error> for CliError {
    fn from(err: std::io::Error) -> Self {
        if err.kind() == std::io::ErrorKind::BrokenPipe {
            CliError::BrokenPipe
        } else {
            CliError::Output(err)
        }
    }
}

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::BadUrl { .. } | CliError::Usage(_) => exit::USAGE,
            CliError::Silent(code) => *code,
            CliError::Unreachable { .. }
            | CliError::WatchInterrupted { .. }
            | CliError::LostCoordinator { .. } => exit::UNAVAILABLE,
            CliError::Interrupted { .. } => exit::INTERRUPTED,
            CliError::Rpc(status) => status_exit_code(status.code()),
            CliError::Config(_) => exit::INVALID,
            CliError::TrainingEnded { code, .. } => *code,
            CliError::Output(_) | CliError::Download { .. } | CliError::WriteFile { .. } => {
                exit::GENERIC
            }
            CliError::BrokenPipe => exit::OK,
        }
    }
}

impl CliError {
    /// The error as one JSON object for `-o json`: the human message, the exit
    /// code and, when the coordinator sent them, the gRPC code, the ErrorInfo
    /// reason and metadata, and the BadRequest field violations.
    pub fn to_json(&self) -> Value {
        let mut error = json!({
            "message": self.to_string(),
            "exit_code": self.exit_code(),
        });
        match self {
            CliError::Rpc(status) => {
                error["grpc_code"] = code_name(status.code()).into();
                if let Some(info) = status.get_details_error_info() {
                    error["reason"] = info.reason.into();
                    error["metadata"] = json!(info.metadata);
                }
                if let Some(bad) = status.get_details_bad_request() {
                    error["field_violations"] = bad
                        .field_violations
                        .iter()
                        .map(|v| json!({ "field": v.field, "description": v.description }))
                        .collect();
                }
            }
            CliError::Config(ConfigError::Invalid { field, reason }) => {
                error["reason"] = Reason::InvalidConfig.as_str().into();
                error["field_violations"] = json!([{ "field": field, "description": reason }]);
            }
            _ => {}
        }
        json!({ "error": error })
    }
}

/// A status code's canonical name, e.g. `NOT_FOUND`.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

fn reason_suffix(reason: &str) -> String {
    if reason.is_empty() {
        String::new()
    } else {
        format!(": {reason}")
    }
}

/// The exit code for a gRPC status code.
pub fn status_exit_code(code: Code) -> u8 {
    match code {
        Code::Ok => exit::OK,
        Code::NotFound => exit::NOT_FOUND,
        Code::InvalidArgument | Code::OutOfRange => exit::INVALID,
        Code::Unavailable | Code::DeadlineExceeded => exit::UNAVAILABLE,
        Code::FailedPrecondition | Code::AlreadyExists | Code::Aborted => exit::REFUSED,
        Code::ResourceExhausted => exit::REFUSED,
        Code::Unauthenticated | Code::PermissionDenied => exit::DENIED,
        _ => exit::GENERIC,
    }
}

/// A config problem found before anything was sent.
pub fn describe_config_error(err: &ConfigError) -> String {
    match err {
        ConfigError::Invalid { field, reason } => {
            format!("the config is invalid: {field}: {reason}")
        }
        ConfigError::Read { path, reason } => format!("cannot read the config {path}: {reason}"),
        ConfigError::Parse { format, reason } => {
            format!("the config is not valid {format}: {}", reason.trim_end())
        }
    }
}

/// A gRPC error in human words: what went wrong by the ErrorInfo reason (or,
/// without one, by the status code), then the server's own words.
pub fn describe_status(status: &Status) -> String {
    let message = status.message().trim();
    let violations: Vec<String> = status
        .get_details_bad_request()
        .map(|b| {
            b.field_violations
                .into_iter()
                .map(|v| {
                    let field = v.field.strip_prefix("config.").unwrap_or(&v.field);
                    format!("{field}: {}", v.description)
                })
                .collect()
        })
        .unwrap_or_default();
    let reason = cohort_proto::error::reason_of(status);
    let detail = if violations.is_empty() {
        message.to_string()
    } else {
        violations.join("; ")
    };
    let with = |what: &str| {
        if detail.is_empty() {
            what.to_string()
        } else {
            format!("{what}: {detail}")
        }
    };
    match reason {
        Some(Reason::InvalidConfig) => with("the config is invalid"),
        Some(Reason::InvalidArgument) => with("the request is invalid"),
        Some(Reason::InvalidPageToken) => {
            with("the page token is not valid (start again without --page-token)")
        }
        Some(Reason::TrainingNotFound) => with("no such training"),
        Some(Reason::GpuNotFound) => with("no such GPU (see `cohort gpus` for GPU ids)"),
        Some(Reason::GpuBusy) => with("a requested GPU is held by another training"),
        Some(Reason::GpuUnhealthy) => with("a requested GPU is offline or unhealthy"),
        Some(Reason::InsufficientGpus) => {
            with("not enough free GPUs (without --no-queue the training waits in the queue)")
        }
        Some(Reason::NoAgents) => {
            with("no agent is connected (without --no-queue the training waits in the queue)")
        }
        Some(Reason::InsufficientMemory) => with("a GPU has too little memory for this training"),
        Some(Reason::IllegalTransition) => with("not allowed in the training's current state"),
        Some(Reason::RequestIdConflict) => {
            with("this request id was already used for a different request")
        }
        Some(Reason::Unauthenticated) => {
            with("not authenticated (give a token with --token or COHORT_TOKEN)")
        }
        Some(Reason::PermissionDenied) => with("permission denied"),
        Some(Reason::PriorityClassNotAllowed) => with("the team may not use this priority class"),
        Some(Reason::TokenExists) => with("the team already has a token of that name"),
        Some(Reason::TokenNotFound) => with("no such token"),
        Some(Reason::WebhookNotFound) => with("no such webhook"),
        Some(Reason::WebhooksFull) => with("the team has as many webhooks as it may"),
        Some(Reason::QueueFull) => with("the team's queue is full"),
        Some(Reason::QuotaExceeded) => with("the team's GPU quota is exceeded"),
        Some(Reason::Internal) => with("the coordinator failed"),
        _ => with(code_phrase(status.code())),
    }
}

/// What a status code means when no ErrorInfo says more.
fn code_phrase(code: Code) -> &'static str {
    match code {
        Code::Ok => "no error",
        Code::Cancelled => "the request was cancelled",
        Code::InvalidArgument => "the request is invalid",
        Code::DeadlineExceeded => "the coordinator did not answer in time",
        Code::NotFound => "not found",
        Code::AlreadyExists => "it already exists",
        Code::PermissionDenied => "permission denied",
        Code::ResourceExhausted => "the coordinator is out of resources",
        Code::FailedPrecondition => "not possible now",
        Code::Aborted => "the request was aborted, try again",
        Code::OutOfRange => "a value is out of range",
        Code::Unimplemented => "the coordinator does not support this request",
        Code::Internal => "the coordinator failed",
        Code::Unavailable => "the coordinator is unavailable",
        Code::DataLoss => "data was lost",
        Code::Unauthenticated => "not authenticated",
        Code::Unknown => "the coordinator answered with an unknown error",
    }
}

/// The messages of an error and its sources, without repeats.
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(err);
    while let Some(e) = next {
        let text = e.to_string();
        // tonic's outermost "transport error" says nothing the sources don't.
        let noise = text.is_empty() || text == "transport error";
        if !noise && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = e.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use cohort_proto::error::{bad_field, status};

    #[test]
    fn config_violation_names_the_field_without_prefix() {
        let s = bad_field(
            Reason::InvalidConfig,
            "config.optim.batch_size",
            "must be in 1..=16777216",
        );
        let err = CliError::from(s);
        assert_eq!(
            err.to_string(),
            "the config is invalid: optim.batch_size: must be in 1..=16777216"
        );
        assert_eq!(err.exit_code(), exit::INVALID);
    }

    #[test]
    fn reasons_become_human_words_and_exit_codes() {
        let s = status(
            Code::NotFound,
            Reason::TrainingNotFound,
            "training t-42 not found",
            [],
        );
        let err = CliError::from(s);
        assert_eq!(err.to_string(), "no such training: training t-42 not found");
        assert_eq!(err.exit_code(), exit::NOT_FOUND);

        let s = status(
            Code::FailedPrecondition,
            Reason::GpuBusy,
            "GPU SIM-1 is held by training t-1",
            [("gpu".to_string(), "SIM-1".to_string())],
        );
        let err = CliError::from(s);
        assert_eq!(
            err.to_string(),
            "a requested GPU is held by another training: GPU SIM-1 is held by training t-1"
        );
        assert_eq!(err.exit_code(), exit::REFUSED);
    }

    #[test]
    fn statuses_without_details_use_the_code() {
        let err = CliError::from(Status::unavailable("shutting down"));
        assert_eq!(
            err.to_string(),
            "the coordinator is unavailable: shutting down"
        );
        assert_eq!(err.exit_code(), exit::UNAVAILABLE);
        let err = CliError::from(Status::unimplemented(""));
        assert_eq!(
            err.to_string(),
            "the coordinator does not support this request"
        );
        assert_eq!(err.exit_code(), exit::GENERIC);
    }

    #[test]
    fn local_config_errors() {
        let err = CliError::Config(ConfigError::Invalid {
            field: "model.d_in".into(),
            reason: "must be > 0".into(),
        });
        assert_eq!(
            err.to_string(),
            "the config is invalid: model.d_in: must be > 0"
        );
        assert_eq!(err.exit_code(), exit::INVALID);
    }

    #[test]
    fn errors_as_json_carry_code_reason_and_fields() {
        let s = bad_field(Reason::InvalidConfig, "config.optim.steps", "must be > 0");
        let v = CliError::from(s).to_json();
        assert_eq!(v["error"]["grpc_code"], "INVALID_ARGUMENT");
        assert_eq!(v["error"]["reason"], "INVALID_CONFIG");
        assert_eq!(v["error"]["exit_code"], 4);
        assert_eq!(
            v["error"]["field_violations"][0]["field"],
            "config.optim.steps"
        );
        assert_eq!(
            v["error"]["message"],
            "the config is invalid: optim.steps: must be > 0"
        );
        let v = CliError::Unreachable {
            url: "http://x:1".into(),
            reason: "refused".into(),
        }
        .to_json();
        assert_eq!(v["error"]["exit_code"], 5);
        assert_eq!(v["error"].get("reason"), None);
    }

    #[test]
    fn chain_skips_repeats() {
        let inner = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert_eq!(error_chain(&inner), "refused");
    }
}
