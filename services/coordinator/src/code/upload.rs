//! One upload in progress: its bytes go to a staging file while they are
//! hashed and counted; [`Upload::finish`] publishes them only when they
//! are exactly what the header said, and every other end removes the file.

use super::{CodeError, CodeStore};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use tokio::io::AsyncWriteExt;

/// A staged upload.
pub struct Upload {
    path: PathBuf,
    file: tokio::fs::File,
    digest: Sha256,
    sha256: String,
    declared: u64,
    written: u64,
}

impl Upload {
    pub(super) async fn stage(dir: &Path, sha256: &str, declared: u64) -> Result<Self, CodeError> {
        let path = dir.join(format!("{sha256}.{}.part", uuid::Uuid::new_v4().simple()));
        let file = tokio::fs::File::create(&path)
            .await
            .map_err(|e| CodeError::Storage(format!("{}: {e}", path.display())))?;
        Ok(Self {
            path,
            file,
            digest: Sha256::new(),
            sha256: sha256.to_string(),
            declared,
            written: 0,
        })
    }

    fn mismatch(&self, why: String) -> CodeError {
        CodeError::Mismatch {
            sha256: self.sha256.clone(),
            why,
        }
    }

    /// Appends `data`; more than the header declared is refused.
    pub async fn write(&mut self, data: &[u8]) -> Result<(), CodeError> {
        let total = self.written.saturating_add(data.len() as u64);
        if total > self.declared {
            return Err(self.mismatch(format!(
                "more than the {} bytes the header declared",
                self.declared
            )));
        }
        self.file
            .write_all(data)
            .await
            .map_err(|e| CodeError::Storage(format!("{}: {e}", self.path.display())))?;
        self.digest.update(data);
        self.written = total;
        Ok(())
    }

    /// Checks the whole upload and publishes it in `store`; returns the
    /// archive's size.
    pub async fn finish(mut self, store: &CodeStore) -> Result<u64, CodeError> {
        if self.written != self.declared {
            return Err(self.mismatch(format!(
                "{} bytes came of the {} declared",
                self.written, self.declared
            )));
        }
        let got = format!("{:x}", self.digest.clone().finalize());
        if got != self.sha256 {
            return Err(self.mismatch(format!("the bytes' sha256 is {got}")));
        }
        let synced = match self.file.sync_all().await {
            Ok(()) => Ok(()),
            Err(e) => Err(CodeError::Storage(format!("{}: {e}", self.path.display()))),
        };
        synced?;
        let size = self.written;
        let path = std::mem::take(&mut self.path);
        store.publish(path, &self.sha256).await?;
        tracing::info!(sha256 = %self.sha256, bytes = size, "code snapshot stored");
        Ok(size)
    }
}

impl Drop for Upload {
    /// An upload that was not published leaves nothing behind.
    fn drop(&mut self) {
        if !self.path.as_os_str().is_empty() {
            let path = std::mem::take(&mut self.path);
            // A small unlink; spawned so that no drop blocks the runtime.
            match tokio::runtime::Handle::try_current() {
                Ok(handle) => {
                    handle.spawn(async move {
                        let _ = tokio::fs::remove_file(path).await;
                    });
                }
                Err(_) => {
                    #[allow(clippy::disallowed_methods)]
                    let _ = std::fs::remove_file(path);
                }
            }
        }
    }
}
