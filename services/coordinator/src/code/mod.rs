//! Programs' code snapshots (`[program] code`): the content-addressed
//! `.tar.gz` archives clients upload (UploadCode) and agents fetch before
//! they start ranks from them (FetchCode).
//!
//! Kept once per sha256 as `<sha256>.tar.gz` under `--code-storage` (the
//! data dir's `code/` by default, or an `s3://bucket/prefix`). An upload
//! is written to a staging file while it is hashed and counted, and only a
//! complete archive with the sha256 and size its header named is published
//! (renamed into place, or uploaded to the bucket): nothing of a refused or
//! broken upload is kept. Archives are not unpacked here: the agents do
//! that, confined (`cohort_code::unpack`).

mod upload;

pub use upload::Upload;

use cohort_proto::error::{metadata, Metadata, Reason, ServiceError};
use cohort_spec::code::is_sha256_hex;
use cohort_spec::location::Location;
use cohort_storage::Objects;
use std::path::PathBuf;
use std::sync::Arc;
use tonic::Code;

/// The default cap on one archive: 64 MiB.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;
/// The bytes of one FetchCode chunk.
pub const CHUNK: usize = 1 << 20;

/// Why a code call fails.
#[derive(Debug, thiserror::Error)]
pub enum CodeError {
    #[error("no code snapshot sha256:{sha256} was uploaded")]
    NotFound { sha256: String },
    /// CreateTraining of a snapshot never uploaded.
    #[error("no code snapshot sha256:{sha256} was uploaded: upload it first (cohort train submit --code does)")]
    NotUploaded { sha256: String },
    #[error("the code snapshot is {size} bytes, over this coordinator's --code-max-mib ({max} bytes): leave large files out with a .cohortignore")]
    TooLarge { size: u64, max: u64 },
    #[error("the upload does not match its header: {why}; nothing was kept")]
    Mismatch { sha256: String, why: String },
    #[error("{field}: {why}")]
    Invalid { field: &'static str, why: String },
    #[error("this coordinator keeps no code snapshots")]
    Unconfigured,
    #[error("code storage: {0}")]
    Storage(String),
}

crate::error::from_service_errors!(CodeError);

/// Through the one error table (`api/error.rs`).
impl From<CodeError> for tonic::Status {
    fn from(err: CodeError) -> Self {
        crate::error::ApiError::from(err).into()
    }
}

impl ServiceError for CodeError {
    fn code(&self) -> Code {
        match self {
            CodeError::NotFound { .. } => Code::NotFound,
            CodeError::NotUploaded { .. } | CodeError::Unconfigured => Code::FailedPrecondition,
            CodeError::TooLarge { .. } => Code::ResourceExhausted,
            CodeError::Mismatch { .. } | CodeError::Invalid { .. } => Code::InvalidArgument,
            CodeError::Storage(_) => Code::Unavailable,
        }
    }

    fn reason(&self) -> Reason {
        match self {
            CodeError::NotFound { .. } | CodeError::NotUploaded { .. } => Reason::CodeNotFound,
            CodeError::TooLarge { .. } => Reason::CodeTooLarge,
            CodeError::Mismatch { .. } => Reason::CodeDigestMismatch,
            CodeError::Invalid { .. } => Reason::InvalidArgument,
            CodeError::Unconfigured | CodeError::Storage(_) => Reason::Internal,
        }
    }

    fn metadata(&self) -> Metadata {
        match self {
            CodeError::NotFound { sha256 }
            | CodeError::NotUploaded { sha256 }
            | CodeError::Mismatch { sha256, .. } => metadata([("sha256", sha256.clone())]),
            CodeError::TooLarge { size, max } => metadata([
                ("size_bytes", size.to_string()),
                ("max_bytes", max.to_string()),
            ]),
            CodeError::Invalid { field, .. } => metadata([("field", field.to_string())]),
            _ => Vec::new(),
        }
    }

    fn client_message(&self) -> String {
        match self {
            CodeError::Storage(_) => "code storage is unavailable; try again".into(),
            other => other.to_string(),
        }
    }

    fn log(&self) {
        if let CodeError::Storage(e) = self {
            tracing::warn!(error = %e, "code storage failed");
        }
    }
}

/// Checks a sha256 a request names.
pub fn checked_sha256(field: &'static str, sha256: &str) -> Result<(), CodeError> {
    if is_sha256_hex(sha256) {
        Ok(())
    } else {
        Err(CodeError::Invalid {
            field,
            why: "not a sha256 (64 lowercase hex digits)".into(),
        })
    }
}

/// Where the archives are kept, and the largest one taken.
#[derive(Clone, Default)]
pub struct CodeStore {
    inner: Option<Arc<Inner>>,
}

impl std::fmt::Debug for CodeStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            Some(inner) => write!(f, "CodeStore({}, max {} bytes)", inner.at, inner.max_bytes),
            None => f.write_str("CodeStore(none)"),
        }
    }
}

struct Inner {
    at: Location,
    objects: Objects,
    staging: PathBuf,
    max_bytes: u64,
}

fn file_of(sha256: &str) -> String {
    format!("{sha256}.tar.gz")
}

impl CodeStore {
    /// The store at `at` (a local directory is made), staging uploads in
    /// `staging` (made; a local directory of the coordinator's).
    pub async fn open(at: Location, staging: PathBuf, max_bytes: u64) -> Result<Self, String> {
        if let Some(dir) = at.local() {
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(|e| format!("--code-storage {}: {e}", dir.display()))?;
        }
        tokio::fs::create_dir_all(&staging)
            .await
            .map_err(|e| format!("{}: {e}", staging.display()))?;
        let objects = Objects::open(&at, None)?;
        Ok(Self {
            inner: Some(Arc::new(Inner {
                at,
                objects,
                staging,
                max_bytes,
            })),
        })
    }

    fn inner(&self) -> Result<&Inner, CodeError> {
        self.inner.as_deref().ok_or(CodeError::Unconfigured)
    }

    /// The largest archive taken.
    pub fn max_bytes(&self) -> u64 {
        self.inner.as_ref().map_or(0, |i| i.max_bytes)
    }

    /// The size of the archive `sha256`, or `None` when it was never uploaded.
    pub async fn size_of(&self, sha256: &str) -> Result<Option<u64>, CodeError> {
        checked_sha256("sha256", sha256)?;
        self.inner()?
            .objects
            .size_if_present(&file_of(sha256))
            .await
            .map_err(CodeError::Storage)
    }

    /// An upload of `size` bytes that must hash to `sha256`, staged.
    pub async fn begin(&self, sha256: &str, size: u64) -> Result<Upload, CodeError> {
        checked_sha256("header.sha256", sha256)?;
        let inner = self.inner()?;
        if size == 0 {
            return Err(CodeError::Invalid {
                field: "header.size_bytes",
                why: "must be > 0".into(),
            });
        }
        if size > inner.max_bytes {
            return Err(CodeError::TooLarge {
                size,
                max: inner.max_bytes,
            });
        }
        Upload::stage(&inner.staging, sha256, size).await
    }

    /// Publishes a verified upload under its sha256.
    pub(crate) async fn publish(&self, staged: PathBuf, sha256: &str) -> Result<(), CodeError> {
        let inner = self.inner()?;
        let name = file_of(sha256);
        let result = match &inner.at {
            Location::Local(dir) => tokio::fs::rename(&staged, dir.join(&name))
                .await
                .map_err(|e| e.to_string()),
            Location::S3 { bucket, key } => {
                let (bucket, key) = (bucket.clone(), cohort_spec::location::join_key(key, &name));
                let from = staged.clone();
                tokio::task::spawn_blocking(move || {
                    #[allow(clippy::disallowed_methods)] // off the runtime
                    let file = std::fs::File::open(&from).map_err(|e| e.to_string())?;
                    cohort_storage::s3::Bucket::process(&bucket)?.upload(&key, file)
                })
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r)
            }
        };
        let _ = tokio::fs::remove_file(&staged).await;
        result.map_err(CodeError::Storage)
    }

    /// `len` bytes of archive `sha256` from `offset`.
    pub async fn read(&self, sha256: &str, offset: u64, len: usize) -> Result<Vec<u8>, CodeError> {
        self.inner()?
            .objects
            .read(&file_of(sha256), offset, len)
            .await
            .map_err(CodeError::Storage)
    }
}
