//! `[program] code = "DIR"` and `cohort train submit --code DIR`: the
//! directory is packed (honouring `.gitignore` and `.cohortignore`, capped),
//! uploaded unless the coordinator already holds that sha256, and the
//! config then names the snapshot instead of the path.

use crate::client::Coordinator;
use crate::errors::CliError;
use cohort_proto::error::Reason;
use cohort_proto::v1;
use cohort_proto::v1::training_service_client::TrainingServiceClient;
use cohort_proto::v1::upload_code_request::Part;
use cohort_spec::code::{CodeSnapshot, CodeSource};
use cohort_spec::{ConfigError, Workload};
use std::io::{Read, Seek};
use std::path::{Path, PathBuf};

/// Bytes per UploadCode message.
const CHUNK: usize = 1 << 20;

fn invalid(reason: impl Into<String>) -> CliError {
    CliError::Config(ConfigError::Invalid {
        field: "program.code".into(),
        reason: reason.into(),
    })
}

/// The directory to pack: `--code` (as given, from the working directory)
/// or the config's `code` path, which must lie in the config file's
/// directory tree (its links resolved). `None`: nothing to pack.
fn source_dir(
    workload: &Workload,
    config_file: Option<&Path>,
    flag: Option<&Path>,
) -> Result<Option<PathBuf>, CliError> {
    let Some(program) = workload.program() else {
        return match flag {
            Some(_) => Err(CliError::Usage(
                "--code is for program trainings ([program] in the config)".into(),
            )),
            None => Ok(None),
        };
    };
    if let Some(dir) = flag {
        return std::fs::canonicalize(dir)
            .map(Some)
            .map_err(|e| invalid(format!("--code {}: {e}", dir.display())));
    }
    let Some(CodeSource::Path(relative)) = &program.program.code else {
        return Ok(None);
    };
    let base = config_file
        .and_then(Path::parent)
        .map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })
        .unwrap_or(Path::new("."));
    let base =
        std::fs::canonicalize(base).map_err(|e| invalid(format!("{}: {e}", base.display())))?;
    let dir = std::fs::canonicalize(base.join(relative))
        .map_err(|e| invalid(format!("{relative}: {e}")))?;
    if !dir.starts_with(&base) {
        return Err(invalid(format!(
            "{relative} ({}) lies outside the config file's directory {}",
            dir.display(),
            base.display()
        )));
    }
    Ok(Some(dir))
}

/// Packs `dir` into a temporary file; the snapshot it makes, and the file.
fn pack(dir: &Path, max_mib: u64) -> Result<(CodeSnapshot, std::fs::File), CliError> {
    // An anonymous file: gone when closed, whatever happens.
    let mut file = tempfile::tempfile().map_err(|e| invalid(format!("a temporary file: {e}")))?;
    let packed = cohort_code::pack(dir, max_mib << 20, &mut file)
        .map_err(|e| invalid(format!("{}: {e}", e.reason())))?;
    file.rewind().map_err(|e| invalid(e.to_string()))?;
    let git = cohort_code::git_state(dir);
    let snapshot = CodeSnapshot {
        sha256: packed.sha256,
        size_bytes: packed.size_bytes,
        files: packed.files,
        git_commit: git.as_ref().map(|g| g.commit.clone()),
        git_dirty: git.is_some_and(|g| g.dirty),
    };
    Ok((snapshot, file))
}

/// Uploads the archive unless the coordinator holds it; whether it sent it.
async fn upload(
    coordinator: &Coordinator,
    snapshot: &CodeSnapshot,
    mut file: std::fs::File,
) -> Result<bool, CliError> {
    let mut client = TrainingServiceClient::new(coordinator.channel().await?);
    let held = client
        .get_code(v1::GetCodeRequest {
            sha256: snapshot.sha256.clone(),
        })
        .await;
    match held {
        Ok(found) if found.get_ref().size_bytes == snapshot.size_bytes => return Ok(false),
        Ok(_) => {}
        Err(s) if cohort_proto::error::reason_of(&s) == Some(Reason::CodeNotFound) => {}
        Err(s) => return Err(s.into()),
    }
    let header = v1::UploadCodeRequest {
        part: Some(Part::Header(v1::CodeHeader {
            sha256: snapshot.sha256.clone(),
            size_bytes: snapshot.size_bytes,
        })),
    };
    // The archive is read in chunks as the stream is sent, never whole.
    let chunks = std::iter::from_fn(move || {
        let mut buf = vec![0u8; CHUNK];
        match file.read(&mut buf) {
            Ok(0) | Err(_) => None,
            Ok(n) => {
                buf.truncate(n);
                Some(v1::UploadCodeRequest {
                    part: Some(Part::Data(buf)),
                })
            }
        }
    });
    let stream = tokio_stream::iter(std::iter::once(header).chain(chunks));
    client.upload_code(stream).await?;
    Ok(true)
}

/// Packs and uploads the training's code when it has a directory to pack,
/// and makes its config name the snapshot. Says what it did on stderr
/// unless `quiet`.
pub async fn attach(
    coordinator: &Coordinator,
    workload: &mut Workload,
    config_file: Option<&Path>,
    flag: Option<&Path>,
    max_mib: u64,
    quiet: bool,
) -> Result<(), CliError> {
    let Some(dir) = source_dir(workload, config_file, flag)? else {
        return Ok(());
    };
    let (snapshot, file) = pack(&dir, max_mib)?;
    let sent = upload(coordinator, &snapshot, file).await?;
    if !quiet {
        eprintln!(
            "code: {}, {}",
            crate::render::program::code_text(&(&snapshot).into()),
            if sent {
                "uploaded"
            } else {
                "already on the coordinator"
            }
        );
    }
    if let Workload::Program(p) = workload {
        p.program.code = Some(CodeSource::Snapshot(snapshot));
    }
    Ok(())
}
