//! One coordinator per SQLite database. SQLite lets a second process open
//! the same file, and two schedulers would then place the same trainings
//! twice; so a coordinator on SQLite holds an exclusive lock on
//! `<database>.lock` for as long as it runs (the kernel drops it when the
//! process dies, kill -9 included), and a second one refuses to start,
//! naming the first one's pid. Several coordinators need PostgreSQL.

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Held while the coordinator runs; dropping it releases the lock.
#[derive(Debug)]
pub struct SqliteLock {
    _file: std::fs::File,
    pub path: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("cannot open the lock file {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "another coordinator{holder} is using the SQLite database {database}: one coordinator \
         per SQLite database (several coordinators need PostgreSQL, --database-url)"
    )]
    Held { database: PathBuf, holder: String },
}

/// Takes the lock of the SQLite database at `database`, or says who holds it.
pub async fn lock_sqlite(database: &Path) -> Result<SqliteLock, LockError> {
    let mut name = database.as_os_str().to_owned();
    name.push(".lock");
    let path = PathBuf::from(name);
    let open_error = |source| LockError::Open {
        path: path.clone(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        tokio::fs::create_dir_all(dir).await.map_err(open_error)?;
    }
    let file = tokio::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .await
        .map_err(open_error)?
        .into_std()
        .await;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let pid = tokio::fs::read_to_string(&path).await.unwrap_or_default();
            let pid = pid.trim();
            return Err(LockError::Held {
                database: database.to_path_buf(),
                holder: if pid.is_empty() {
                    String::new()
                } else {
                    format!(" (pid {pid})")
                },
            });
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(open_error(e)),
    }
    // Who holds it, for the next one's message (best effort).
    let _ = file.set_len(0);
    let _ = writeln!(&file, "{}", std::process::id());
    Ok(SqliteLock { _file: file, path })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_holder_is_refused_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("data/coordinator.db");
        let first = lock_sqlite(&db).await.unwrap();
        let err = lock_sqlite(&db).await.unwrap_err().to_string();
        let pid = std::process::id();
        assert!(
            err.contains(&format!("another coordinator (pid {pid})")),
            "{err}"
        );
        assert!(err.contains("--database-url"), "{err}");
        drop(first);
        lock_sqlite(&db).await.expect("free again once released");
    }
}
