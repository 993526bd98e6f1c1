//! Async ranged reads of the files in one directory, on a file system or
//! under an S3 prefix, through object_store (its local and S3 backends):
//! what the coordinator streams a checkpoint from.

use super::s3;
use cohort_spec::location::Location;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use std::sync::Arc;

pub struct Objects {
    store: Arc<dyn ObjectStore>,
    /// The directory's key prefix (empty for a local directory: the store
    /// is rooted there).
    prefix: String,
    /// How messages name the directory.
    name: String,
}

impl Objects {
    /// The directory at `at`; S3 clients are configured from `env` (a
    /// team's AWS_* variables) when given, else from this process's
    /// environment. A local directory must exist.
    pub fn open(at: &Location, env: Option<&[(String, String)]>) -> Result<Self, String> {
        let name = at.to_string();
        let (store, prefix): (Arc<dyn ObjectStore>, String) = match at {
            Location::Local(dir) => (
                Arc::new(
                    LocalFileSystem::new_with_prefix(dir).map_err(|e| format!("{name}: {e}"))?,
                ),
                String::new(),
            ),
            Location::S3 { bucket, key } => (
                Arc::new(s3::config(bucket, env)?),
                key.trim_end_matches('/').to_string(),
            ),
        };
        Ok(Self {
            store,
            prefix,
            name,
        })
    }

    fn key(&self, file: &str) -> ObjectPath {
        if self.prefix.is_empty() {
            ObjectPath::from(file)
        } else {
            ObjectPath::from(format!("{}/{file}", self.prefix))
        }
    }

    fn failed(&self, file: &str, e: impl std::fmt::Display) -> String {
        format!("{}/{file}: {e}", self.name.trim_end_matches('/'))
    }

    /// The files under the directory (paths relative to it), sorted; more
    /// than `max` is an error.
    pub async fn list(&self, max: usize) -> Result<Vec<String>, String> {
        use futures::TryStreamExt;
        let prefix = (!self.prefix.is_empty()).then(|| ObjectPath::from(self.prefix.as_str()));
        let mut stream = self.store.list(prefix.as_ref());
        let mut names = Vec::new();
        let under = format!("{}/", self.prefix);
        while let Some(meta) = stream.try_next().await.map_err(|e| self.failed("", e))? {
            let key = meta.location.to_string();
            let relative = key.strip_prefix(&under).unwrap_or(&key).to_string();
            if names.len() == max {
                return Err(format!("{}: more than {max} files", self.name));
            }
            names.push(relative);
        }
        names.sort();
        Ok(names)
    }

    /// The size of `file`.
    pub async fn size(&self, file: &str) -> Result<u64, String> {
        self.store
            .head(&self.key(file))
            .await
            .map(|m| m.size)
            .map_err(|e| self.failed(file, e))
    }

    /// The size of `file`, or `None` when there is none.
    pub async fn size_if_present(&self, file: &str) -> Result<Option<u64>, String> {
        match self.store.head(&self.key(file)).await {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.failed(file, e)),
        }
    }

    /// `len` bytes of `file` from `offset`.
    pub async fn read(&self, file: &str, offset: u64, len: usize) -> Result<Vec<u8>, String> {
        if len == 0 {
            return Ok(Vec::new());
        }
        let got = self
            .store
            .get_range(&self.key(file), offset..offset + len as u64)
            .await
            .map_err(|e| self.failed(file, e))?;
        if got.len() != len {
            return Err(self.failed(file, "the file ended early"));
        }
        Ok(got.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn a_local_directory_reads_by_ranges() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("f"), b"hello world").unwrap();
        let objects = Objects::open(&Location::Local(tmp.path().into()), None).unwrap();
        assert_eq!(objects.size("f").await.unwrap(), 11);
        assert_eq!(objects.read("f", 6, 5).await.unwrap(), b"world");
        assert!(objects.read("f", 6, 50).await.is_err(), "past the end");
        assert!(objects.size("g").await.is_err());
        assert!(Objects::open(&Location::Local(tmp.path().join("none")), None).is_err());
    }
}
