//! Why rows could not be read. The bytes themselves come from the storage
//! crate ([`cohort_storage::Blob`]: local files and S3 objects).

/// Why rows could not be read: the storage failed (a restart may help), or
/// the bytes are not what the header promised (the data is at fault).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Io(String),
    #[error("{0}")]
    Data(String),
}

impl ReadError {
    /// The same error, naming the shard.
    pub fn in_shard(self, name: &str) -> Self {
        match self {
            ReadError::Io(e) => ReadError::Io(format!("{name}: {e}")),
            ReadError::Data(e) => ReadError::Data(format!("{name}: {e}")),
        }
    }
}

impl From<ReadError> for crate::error::RankError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Io(e) => crate::error::RankError::DataUnavailable(e),
            ReadError::Data(e) => crate::error::RankError::Data(e),
        }
    }
}
