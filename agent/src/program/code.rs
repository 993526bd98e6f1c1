//! A program's code snapshot on this host: fetched from the coordinator
//! by sha256 (FetchCode) into `<work dir>/code/`, checked against its
//! sha256 and size, unpacked read-only and confined to its root
//! ([`cohort_code::unpack`]), then shared by every rank and attempt that
//! runs it. A snapshot is fetched once per host; one unused for
//! [`IDLE_EVICTION`] is removed when another is fetched.

use super::peer::PeerLink;
use cohort_proto::v1;
use cohort_proto::v1::agent_service_client::AgentServiceClient;
use cohort_spec::code::CodeSnapshot;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use tokio::io::AsyncWriteExt;

/// A snapshot no start has used for this long is removed.
pub const IDLE_EVICTION: Duration = Duration::from_secs(7 * 86_400);
/// How long one fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(600);

/// One fetch at a time on this host (two trainings of the same code
/// starting together fetch it once).
static FETCHING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The cache directory under the agent's work dir.
pub fn cache_dir(work_dir: &Path) -> PathBuf {
    work_dir.join("code")
}

/// The unpacked snapshot's root, fetched when this host lacks it.
pub async fn ensure(
    link: Option<&PeerLink>,
    cache: &Path,
    snapshot: &CodeSnapshot,
) -> Result<PathBuf, String> {
    let root = cache.join(&snapshot.sha256);
    let _one = FETCHING.lock().await;
    if tokio::fs::metadata(&root).await.is_ok() {
        touch(&root).await;
        return Ok(root);
    }
    let link = link.ok_or("no coordinator session to fetch the program's code from")?;
    tokio::fs::create_dir_all(cache)
        .await
        .map_err(|e| format!("{}: {e}", cache.display()))?;
    let archive = cache.join(format!(".{}.tar.gz.part", snapshot.sha256));
    let fetched = tokio::time::timeout(FETCH_TIMEOUT, download(link, snapshot, &archive))
        .await
        .unwrap_or_else(|_| Err(format!("not done within {} s", FETCH_TIMEOUT.as_secs())));
    let unpacked = match fetched {
        Ok(()) => unpack(&archive, cache, snapshot).await,
        Err(e) => Err(e),
    };
    let _ = tokio::fs::remove_file(&archive).await;
    unpacked?;
    tracing::info!(sha256 = %snapshot.sha256, bytes = snapshot.size_bytes, root = %root.display(), "code snapshot fetched");
    evict_idle(cache.to_path_buf(), snapshot.sha256.clone()).await;
    Ok(root)
}

/// Streams the archive into `into`, checking its size and sha256.
async fn download(link: &PeerLink, snapshot: &CodeSnapshot, into: &Path) -> Result<(), String> {
    let io = |e: std::io::Error| format!("{}: {e}", into.display());
    let mut out = tokio::fs::File::create(into).await.map_err(io)?;
    let request = v1::FetchCodeRequest {
        agent_id: link.agent_id.clone(),
        sha256: snapshot.sha256.clone(),
    };
    let status = |s: tonic::Status| format!("{}: {}", s.code(), s.message());
    let mut stream = AgentServiceClient::new(link.channel.clone())
        .fetch_code(request)
        .await
        .map_err(status)?
        .into_inner();
    let (mut digest, mut written) = (cohort_code::Digest::new(), 0u64);
    while let Some(chunk) = stream.message().await.map_err(status)? {
        let end = chunk.offset.saturating_add(chunk.data.len() as u64);
        if chunk.offset != written
            || chunk.size_bytes != snapshot.size_bytes
            || end > chunk.size_bytes
        {
            return Err("the coordinator sent a chunk out of order".into());
        }
        out.write_all(&chunk.data).await.map_err(io)?;
        digest.update(&chunk.data);
        written = end;
    }
    out.flush().await.map_err(io)?;
    if written != snapshot.size_bytes {
        return Err(format!("{written} of {} bytes came", snapshot.size_bytes));
    }
    let got = digest.finish();
    if got != snapshot.sha256 {
        return Err(format!("the bytes' sha256 is {got}, not the snapshot's"));
    }
    Ok(())
}

/// Unpacks the checked archive beside the cache, then renames it into place.
async fn unpack(archive: &Path, cache: &Path, snapshot: &CodeSnapshot) -> Result<(), String> {
    let staging = cache.join(format!(".{}.unpacking", snapshot.sha256));
    let root = cache.join(&snapshot.sha256);
    let (archive, size) = (archive.to_path_buf(), snapshot.size_bytes);
    tokio::task::spawn_blocking(move || unpack_blocking(&archive, size, &staging, &root))
        .await
        .map_err(|e| format!("unpacking failed: {e}"))?
}

#[allow(clippy::disallowed_methods)] // run off the runtime
fn unpack_blocking(archive: &Path, size: u64, staging: &Path, root: &Path) -> Result<(), String> {
    if staging.exists() {
        cohort_code::remove_tree(staging).map_err(|e| e.to_string())?;
    }
    let file = std::fs::File::open(archive).map_err(|e| e.to_string())?;
    let limits = cohort_code::UnpackLimits::for_archive(size);
    cohort_code::unpack(std::io::BufReader::new(file), staging, limits)
        .map_err(|e| format!("{}: {e}", e.reason()))?;
    std::fs::rename(staging, root).map_err(|e| format!("{}: {e}", root.display()))
}

/// Marks a snapshot used now (its directory's mtime).
async fn touch(root: &Path) {
    let root = root.to_path_buf();
    let _ = tokio::task::spawn_blocking(move || {
        #[allow(clippy::disallowed_methods)] // off the runtime
        std::fs::File::open(&root).and_then(|d| d.set_modified(SystemTime::now()))
    })
    .await;
}

/// Removes the snapshots (but `keep`) no start used for [`IDLE_EVICTION`].
async fn evict_idle(cache: PathBuf, keep: String) {
    let _ = tokio::task::spawn_blocking(move || evict_blocking(&cache, &keep)).await;
}

#[allow(clippy::disallowed_methods)] // run off the runtime
fn evict_blocking(cache: &Path, keep: &str) {
    let Ok(entries) = std::fs::read_dir(cache) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().to_string();
        let idle = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > IDLE_EVICTION);
        if idle && name != keep && cohort_spec::code::is_sha256_hex(&name) {
            match cohort_code::remove_tree(&entry.path()) {
                Ok(()) => tracing::info!(sha256 = %name, "removed an idle code snapshot"),
                Err(e) => {
                    tracing::warn!(sha256 = %name, error = %e, "cannot remove an idle code snapshot")
                }
            }
        }
    }
}

/// The working directory `relative` inside the snapshot at `root`, with
/// its links resolved; it must stay inside. Blocking.
#[allow(clippy::disallowed_methods)]
pub fn working_dir_in(root: &Path, relative: &str) -> Result<PathBuf, String> {
    let real_root = std::fs::canonicalize(root).map_err(|e| format!("{}: {e}", root.display()))?;
    let dir = std::fs::canonicalize(real_root.join(relative))
        .map_err(|e| format!("program.working_dir {relative:?} in the code snapshot: {e}"))?;
    if !dir.starts_with(&real_root) || !dir.is_dir() {
        return Err(format!(
            "program.working_dir {relative:?} is not a directory inside the code snapshot"
        ));
    }
    Ok(dir)
}

/// The command's arguments after the first: each plain relative path that
/// names something in the snapshot becomes its absolute path there, so
/// `["/venv/bin/python", "train.py"]` runs the snapshot's `train.py`
/// whatever the working directory. Others (flags, values) stay as given.
/// Blocking.
#[allow(clippy::disallowed_methods)]
pub fn resolve_args(root: &Path, args: &[String]) -> Vec<std::ffi::OsString> {
    args.iter()
        .map(|arg| {
            let path = Path::new(arg);
            let plain = !arg.starts_with('-')
                && !arg.is_empty()
                && path
                    .components()
                    .all(|c| matches!(c, std::path::Component::Normal(_)));
            let inside = root.join(path);
            if plain && std::fs::symlink_metadata(&inside).is_ok() {
                inside.into_os_string()
            } else {
                arg.into()
            }
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // test set-up
mod tests {
    use super::*;

    #[test]
    fn relative_arguments_resolve_in_the_snapshot() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("jobs/a")).unwrap();
        std::fs::write(root.path().join("train.py"), "").unwrap();
        let args: Vec<String> = [
            "train.py",
            "--lr",
            "0.1",
            "missing.py",
            "../train.py",
            "jobs",
        ]
        .map(String::from)
        .into();
        let resolved = resolve_args(root.path(), &args);
        assert_eq!(resolved[0], root.path().join("train.py").into_os_string());
        assert_eq!(resolved[1], "--lr");
        assert_eq!(resolved[2], "0.1");
        assert_eq!(resolved[3], "missing.py");
        assert_eq!(resolved[4], "../train.py");
        assert_eq!(resolved[5], root.path().join("jobs").into_os_string());
        let real = root.path().canonicalize().unwrap();
        assert_eq!(working_dir_in(root.path(), "").unwrap(), real);
        assert_eq!(
            working_dir_in(root.path(), "jobs/a").unwrap(),
            real.join("jobs/a")
        );
        std::os::unix::fs::symlink("/etc", root.path().join("out")).unwrap();
        assert!(working_dir_in(root.path(), "out").is_err());
        assert!(working_dir_in(root.path(), "train.py").is_err());
    }
}
