//! The libtorch checks, run in `cohort-rank doctor` processes: `local`
//! once (versions, devices, NCCL, matmuls), `all-reduce` once per
//! participant (one per idle GPU over NCCL, or two over gloo on the CPU).

use super::DoctorSetup;
use cohort_spec::doctor::{AllReduceResult, LocalFacts};
use std::process::Stdio;
use tokio::io::AsyncReadExt;
use tokio::process::Command;

/// Bytes per all-reduce over NCCL unless told otherwise.
pub const NCCL_BYTES: u64 = 256 << 20;
/// Bytes per all-reduce over gloo unless told otherwise.
pub const GLOO_BYTES: u64 = 16 << 20;
/// Output kept of one process (its JSON is a few hundred bytes).
const OUTPUT_CAP: u64 = 64 << 10;

/// How the all-reduce ran.
#[derive(Debug, Clone, PartialEq)]
pub struct AllReduceRun {
    pub result: AllReduceResult,
    /// Which GPUs took part (empty: CPU processes).
    pub gpus: Vec<u32>,
}

fn visible(gpus: &[u32]) -> String {
    gpus.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// A `cohort-rank doctor` command with a clean environment: the agent's
/// PATH, LANG, HOME and LD_LIBRARY_PATH, its NCCL_* settings (so the
/// all-reduce sees what ranks see), CUDA devices numbered as NVML numbers
/// them, and only the GPUs in `gpus`.
fn command(setup: &DoctorSetup, args: &[String], gpus: &[u32]) -> Command {
    let mut command = Command::new(&setup.rank_program);
    command
        .arg("doctor")
        .args(args)
        .env_clear()
        .envs(std::env::vars().filter(|(k, _)| {
            k.starts_with("NCCL_")
                || ["PATH", "LANG", "HOME", "LD_LIBRARY_PATH"].contains(&k.as_str())
        }))
        .env("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        .env("CUDA_VISIBLE_DEVICES", visible(gpus))
        .env("COHORT_EXIT_WITH_PARENT", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Runs one process to its end within the setup's timeout; its stdout, or
/// why it failed (exit status and the end of its stderr).
async fn output(setup: &DoctorSetup, command: Command) -> Result<String, String> {
    let program = setup.rank_program.display().to_string();
    let mut child = crate::supervisor::spawner::spawn(command)
        .await
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err("no pipes to the doctor process".into());
    };
    let read = |pipe: Box<dyn tokio::io::AsyncRead + Unpin + Send>| async move {
        let mut text = String::new();
        let _ = pipe.take(OUTPUT_CAP).read_to_string(&mut text).await;
        text
    };
    let run = async {
        let (out, err, status) =
            tokio::join!(read(Box::new(stdout)), read(Box::new(stderr)), child.wait());
        (out, err, status)
    };
    match tokio::time::timeout(setup.timeout, run).await {
        Err(_) => Err(format!(
            "{program} doctor did not finish within {:?}",
            setup.timeout
        )),
        Ok((_, _, Err(e))) => Err(format!("waiting for {program}: {e}")),
        Ok((out, _, Ok(status))) if status.success() => Ok(out),
        Ok((_, err, Ok(status))) => {
            let last = err
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            Err(format!("{program} doctor ended with {status}: {last}"))
        }
    }
}

fn parse<T: serde::de::DeserializeOwned>(out: &str) -> Result<T, String> {
    let line = out
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .unwrap_or("");
    serde_json::from_str(line).map_err(|e| format!("unreadable doctor output ({e}): {out:.200}"))
}

/// `cohort-rank doctor local` on the idle GPUs (none when `real` is false:
/// the matmul then runs on the CPU).
pub async fn local(setup: &DoctorSetup, idle: &[u32], real: bool) -> Result<LocalFacts, String> {
    let gpus = if real { idle } else { &[] };
    let out = output(setup, command(setup, &["local".to_string()], gpus)).await?;
    parse(&out)
}

/// The all-reduce: over NCCL across the idle GPUs when there are two or
/// more real ones, else over gloo between two CPU processes.
pub async fn all_reduce(
    setup: &DoctorSetup,
    idle: &[u32],
    real: bool,
) -> Result<AllReduceRun, String> {
    let nccl = real && idle.len() >= 2;
    let (backend, bytes, members): (&str, u64, Vec<Vec<u32>>) = if nccl {
        let bytes = setup.all_reduce_bytes.unwrap_or(NCCL_BYTES);
        ("nccl", bytes, idle.iter().map(|g| vec![*g]).collect())
    } else {
        (
            "gloo",
            setup.all_reduce_bytes.unwrap_or(GLOO_BYTES),
            vec![Vec::new(), Vec::new()],
        )
    };
    let port = free_port().map_err(|e| format!("no free port for the rendezvous: {e}"))?;
    let world = members.len();
    let runs = members.iter().enumerate().map(|(rank, gpus)| {
        let args = [
            "all-reduce".to_string(),
            "--backend".into(),
            backend.into(),
            "--bytes".into(),
            bytes.to_string(),
        ];
        let mut command = command(setup, &args, gpus);
        command
            .env("RANK", rank.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .env("WORLD_SIZE", world.to_string())
            .env("LOCAL_WORLD_SIZE", world.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string());
        output(setup, command)
    });
    // Every process starts before any is awaited: they rendezvous.
    let outputs = futures::future::join_all(runs).await;
    let mut first = None;
    for (rank, out) in outputs.into_iter().enumerate() {
        match out {
            Err(e) => return Err(format!("rank {rank}: {e}")),
            Ok(text) if rank == 0 => first = Some(text),
            Ok(_) => {}
        }
    }
    let result = parse(&first.unwrap_or_default())?;
    Ok(AllReduceRun {
        result,
        gpus: if nccl { idle.to_vec() } else { Vec::new() },
    })
}

/// A port nothing listens on right now (the rendezvous store binds it).
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}
