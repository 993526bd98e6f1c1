//! `cohort checkpoints ID` lists a training's complete checkpoints;
//! `cohort checkpoints download` writes DownloadCheckpoint's chunks into a
//! directory, each file under a temporary name until it is whole.

use crate::client::Coordinator;
use crate::errors::CliError;
use crate::render::table::{dash, Table};
use crate::render::time;
use crate::render::{emit, emit_json, json, OutputFormat};
use clap::{Args, Subcommand};
use cohort_proto::v1;
use cohort_proto::v1::training_service_client::TrainingServiceClient;
use cohort_proto::v1::{CheckpointFormat, DownloadCheckpointRequest, ListCheckpointsRequest};
use serde_json::Value;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Args)]
pub struct CheckpointsArgs {
    /// The training id (to list its checkpoints).
    #[arg(required = true)]
    pub id: Option<String>,
    #[command(subcommand)]
    pub command: Option<CheckpointsCommand>,
}

#[derive(Debug, Clone, Subcommand)]
pub enum CheckpointsCommand {
    /// Download a checkpoint's files into a directory: natively
    /// (manifest.json, state.safetensors) or for SAELens (cfg.json,
    /// sae_weights.safetensors; `sae_lens.SAE.load_from_disk(DIR)`).
    Download(DownloadArgs),
}

#[derive(Debug, Clone, Args)]
pub struct DownloadArgs {
    /// The training id.
    pub id: String,
    /// The directory to write into (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: std::path::PathBuf,
    /// The checkpoint's step (default: the newest).
    #[arg(long, conflicts_with = "best")]
    pub step: Option<i64>,
    /// The best checkpoint (the lowest validation loss) instead.
    #[arg(long)]
    pub best: bool,
    /// native or saelens.
    #[arg(long, default_value = "native", value_parser = ["native", "saelens"])]
    pub format: String,
}

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

/// A fresh `.part` file: a leftover one (a link included) is removed, not
/// followed, and the new one is created exclusively without following a
/// link planted meanwhile.
fn create_part(part: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::remove_file(part) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o644)
        .open(part)
}

/// A file name the coordinator sent, split into its directory (relative,
/// possibly empty) and base name; `None` unless every `/`-separated part is
/// a plain name (not empty, `.` or `..`, no backslash, no leading `.` on the
/// base name, which part files use).
fn safe_name(file: &str) -> Option<(std::path::PathBuf, &str)> {
    let parts: Vec<&str> = file.split('/').collect();
    let plain = |p: &&str| !p.is_empty() && *p != "." && *p != ".." && !p.contains('\\');
    if !parts.iter().all(plain) {
        return None;
    }
    let (base, dirs) = parts.split_last()?;
    if base.starts_with('.') {
        return None;
    }
    Some((dirs.iter().collect(), base))
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
            best: args.best,
        })
        .await?
        .into_inner();
    let mut done: Vec<(String, u64)> = Vec::new();
    let mut open: Option<Open> = None;
    let mut step = None;
    while let Some(chunk) = stream.message().await? {
        step = Some(chunk.step);
        // A name that could lead outside --out is refused (a program's
        // checkpoint may have subdirectories: `opt/adam.pt`).
        let Some((dir, base)) = safe_name(&chunk.file) else {
            return Err(fail(
                &args.out,
                format!("the coordinator sent a bad file name {:?}", chunk.file),
            ));
        };
        if open.as_ref().is_none_or(|o| o.name != chunk.file) {
            if let Some(prev) = open.take() {
                done.push(prev.finish()?);
            }
            let parent = args.out.join(dir);
            std::fs::create_dir_all(&parent).map_err(|e| fail(&parent, e))?;
            let path = parent.join(base);
            let part = parent.join(format!(".{base}.part"));
            let file = create_part(&part).map_err(|e| fail(&part, e))?;
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
/// Runs `cohort checkpoints`.
pub async fn run(
    coordinator: &Coordinator,
    args: CheckpointsArgs,
    out: OutputFormat,
) -> Result<(), CliError> {
    match (args.command, args.id) {
        (Some(CheckpointsCommand::Download(d)), _) => download(coordinator, &d, out).await,
        (None, Some(id)) => list(coordinator, &id, out).await,
        (None, None) => Err(CliError::Usage("give a training id".into())),
    }
}

async fn list(coordinator: &Coordinator, id: &str, out: OutputFormat) -> Result<(), CliError> {
    let mut client = TrainingServiceClient::new(coordinator.channel().await?);
    let mut checkpoints = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_checkpoints(ListCheckpointsRequest {
                training_id: id.to_string(),
                page_size: 0,
                page_token,
                ..Default::default()
            })
            .await?
            .into_inner();
        checkpoints.extend(page.checkpoints);
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    match out {
        OutputFormat::Table => emit(&checkpoints_table(&checkpoints)),
        OutputFormat::Json => emit_json(&serde_json::json!({
            "checkpoints": checkpoints.iter().map(json::message).collect::<Vec<Value>>(),
        })),
    }
}

// The table.

pub fn checkpoints_table(checkpoints: &[v1::Checkpoint]) -> String {
    if checkpoints.is_empty() {
        return "no checkpoints".to_string();
    }
    let mut t = Table::new(&["STEP", "ATTEMPT", "AGENT", "PATH", "CREATED"]);
    for c in checkpoints {
        t.row(vec![
            if c.best {
                format!("{} (best)", c.step)
            } else {
                c.step.to_string()
            },
            c.attempt.to_string(),
            dash(&c.agent_id),
            dash(&c.path),
            time(c.create_time.as_ref()),
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::safe_name;
    use std::path::PathBuf;

    #[test]
    fn names_stay_inside_the_output_directory() {
        assert_eq!(
            safe_name("state.safetensors"),
            Some((PathBuf::new(), "state.safetensors"))
        );
        assert_eq!(
            safe_name("opt/adam.pt"),
            Some((PathBuf::from("opt"), "adam.pt"))
        );
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a//b",
            "./a",
            ".hidden",
            "a\\b",
            "a/",
        ] {
            assert_eq!(safe_name(bad), None, "{bad}");
        }
    }
}
