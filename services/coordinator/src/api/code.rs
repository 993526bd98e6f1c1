//! UploadCode and GetCode (TrainingService), FetchCode (AgentService): a
//! program's code snapshot in and out of the [`crate::code::CodeStore`].

use super::error::ApiError;
use crate::api::StatusStream;
use crate::code::{checked_sha256, CodeError, CodeStore, CHUNK};
use cohort_proto::v1;
use cohort_proto::v1::upload_code_request::Part;
use cohort_spec::code::CodeSnapshot;
use tokio_stream::StreamExt;
use tonic::Status;

/// The snapshot the store holds as `sha256` (size only: the rest of a
/// snapshot's description is the client's).
fn described(sha256: &str, size_bytes: u64) -> v1::CodeSnapshot {
    v1::CodeSnapshot {
        sha256: sha256.to_string(),
        size_bytes,
        ..Default::default()
    }
}

/// GetCode.
pub async fn get(store: &CodeStore, req: v1::GetCodeRequest) -> Result<v1::CodeSnapshot, Status> {
    match store.size_of(&req.sha256).await? {
        Some(size) => Ok(described(&req.sha256, size)),
        None => Err(CodeError::NotFound { sha256: req.sha256 }.into()),
    }
}

/// UploadCode: the header, then the bytes; kept only when complete and
/// exactly as the header said. A snapshot already kept is not received
/// again.
pub async fn upload(
    store: &CodeStore,
    mut parts: tonic::Streaming<v1::UploadCodeRequest>,
) -> Result<v1::CodeSnapshot, Status> {
    let header = match parts.message().await? {
        Some(v1::UploadCodeRequest {
            part: Some(Part::Header(header)),
        }) => header,
        _ => {
            return Err(ApiError::field(
                "header",
                "the first message of an upload carries the header (sha256, size_bytes)",
            )
            .into())
        }
    };
    checked_sha256("header.sha256", &header.sha256)?;
    if let Some(size) = store.size_of(&header.sha256).await? {
        if size == header.size_bytes {
            return Ok(described(&header.sha256, size));
        }
    }
    let mut upload = store.begin(&header.sha256, header.size_bytes).await?;
    while let Some(part) = parts.message().await? {
        match part.part {
            Some(Part::Data(data)) => upload.write(&data).await?,
            _ => {
                return Err(
                    ApiError::field("header", "only the first message carries a header").into(),
                )
            }
        }
    }
    let size = upload.finish(store).await?;
    Ok(described(&header.sha256, size))
}

/// The checks a CreateTraining of a program with code makes: its snapshot
/// was uploaded, with the size the config says.
pub async fn check_uploaded(store: &CodeStore, snapshot: &CodeSnapshot) -> Result<(), Status> {
    match store.size_of(&snapshot.sha256).await? {
        Some(size) if size == snapshot.size_bytes => Ok(()),
        Some(size) => Err(ApiError::field(
            "config.program.code.size_bytes",
            format!("the snapshot sha256:{} is {size} bytes", snapshot.sha256),
        )
        .into()),
        None => Err(CodeError::NotUploaded {
            sha256: snapshot.sha256.clone(),
        }
        .into()),
    }
}

/// FetchCode: the archive in chunks of at most 1 MiB, in order.
/// `progress` runs after each chunk is read (the fetching agent counts as
/// seen while it waits).
pub async fn fetch(
    store: &CodeStore,
    sha256: String,
    progress: impl Fn() + Send + 'static,
) -> Result<StatusStream<v1::CodeChunk>, Status> {
    let Some(size) = store.size_of(&sha256).await? else {
        return Err(CodeError::NotFound { sha256 }.into());
    };
    let store = store.clone();
    let offsets = (0..size).step_by(CHUNK);
    let chunks = tokio_stream::iter(offsets).then(move |offset| {
        let (store, sha256) = (store.clone(), sha256.clone());
        progress();
        async move {
            let len = usize::try_from((size - offset).min(CHUNK as u64)).unwrap_or(CHUNK);
            let data = store.read(&sha256, offset, len).await?;
            Ok(v1::CodeChunk {
                offset,
                size_bytes: size,
                data,
            })
        }
    });
    Ok(Box::pin(chunks))
}
