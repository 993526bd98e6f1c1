//! `cohort checkpoints download`: DownloadCheckpoint's chunks written into a
//! directory, each file under a temporary name until it is whole.

use crate::client::Coordinator;
use crate::errors::CliError;
use crate::render::{emit, emit_json, OutputFormat};
use crate::DownloadArgs;
use cohort_proto::v1::training_service_client::TrainingServiceClient;
use cohort_proto::v1::{CheckpointFormat, DownloadCheckpointRequest};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

fn fail(path: &Path, reason: impl std::fmt::Display) -> CliError {
    CliError::Download {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

/// The file being written: its final path, its temporary one, and its size.
struct Open {
    name: String,
    path: PathBuf,
    part: PathBuf,
    file: std::fs::File,
    size: u64,
    written: u64,
}

impl Open {
    fn finish(self) -> Result<(String, u64), CliError> {
        if self.written != self.size {
            return Err(fail(
                &self.path,
                format!(
                    "the stream ended after {} of {} bytes",
                    self.written, self.size
                ),
            ));
        }
        self.file.sync_all().map_err(|e| fail(&self.part, e))?;
        std::fs::rename(&self.part, &self.path).map_err(|e| fail(&self.path, e))?;
        Ok((self.name, self.size))
    }
}

pub async fn download(
    coordinator: &Coordinator,
    args: &DownloadArgs,
    out: OutputFormat,
) -> Result<(), CliError> {
    let format = match args.format.as_str() {
        "saelens" => CheckpointFormat::Saelens,
        _ => CheckpointFormat::Native,
    };
    std::fs::create_dir_all(&args.out).map_err(|e| fail(&args.out, e))?;
    let mut client = TrainingServiceClient::new(coordinator.channel().await?);
    let mut stream = client
        .download_checkpoint(DownloadCheckpointRequest {
            training_id: args.id.clone(),
            step: args.step,
            format: format as i32,
        })
        .await?
        .into_inner();
    let mut done: Vec<(String, u64)> = Vec::new();
    let mut open: Option<Open> = None;
    let mut step = None;
    while let Some(chunk) = stream.message().await? {
        step = Some(chunk.step);
        // A name with a directory in it would write outside --out.
        if chunk.file.is_empty() || chunk.file.contains(['/', '\\']) || chunk.file.starts_with('.')
        {
            return Err(fail(
                &args.out,
                format!("the coordinator sent a bad file name {:?}", chunk.file),
            ));
        }
        if open.as_ref().is_none_or(|o| o.name != chunk.file) {
            if let Some(prev) = open.take() {
                done.push(prev.finish()?);
            }
            let path = args.out.join(&chunk.file);
            let part = args.out.join(format!(".{}.part", chunk.file));
            let file = std::fs::File::create(&part).map_err(|e| fail(&part, e))?;
            open = Some(Open {
                name: chunk.file.clone(),
                path,
                part,
                file,
                size: chunk.file_size,
                written: 0,
            });
        }
        let o = open.as_mut().expect("opened above");
        o.file
            .seek(SeekFrom::Start(chunk.offset))
            .and_then(|_| o.file.write_all(&chunk.data))
            .map_err(|e| fail(&o.part, e))?;
        o.written += chunk.data.len() as u64;
    }
    if let Some(last) = open.take() {
        done.push(last.finish()?);
    }
    let step = step.unwrap_or_default();
    match out {
        OutputFormat::Table => {
            let mut text = format!(
                "checkpoint step {step} of {} ({}) in {}\n",
                args.id,
                args.format,
                args.out.display()
            );
            for (name, size) in &done {
                text.push_str(&format!("  {name}  {size} bytes\n"));
            }
            emit(&text)
        }
        OutputFormat::Json => emit_json(&serde_json::json!({
            "training_id": args.id,
            "step": step,
            "format": args.format,
            "dir": args.out.display().to_string(),
            "files": done.iter().map(|(n, s)| serde_json::json!({"name": n, "bytes": s})).collect::<Vec<_>>(),
        })),
    }
}
