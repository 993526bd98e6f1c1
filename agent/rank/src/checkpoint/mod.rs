//! Checkpoints: written by rank 0 only, holding the whole training state
//! ([`TrainState`]: f32 parameters, Adam, step, loss scale, counters, dead
//! latents) in one safetensors file plus a small JSON manifest written last
//! (the layout and the manifest are the contract in
//! [`cohort_spec::checkpoint`]). A checkpoint is complete exactly when its
//! manifest parses and its state file is there; anything else is ignored. On restore the state file's
//! SHA-256 and the parameters' checksum are verified against the manifest:
//! a corrupt checkpoint is skipped for the next older one.
//!
//! Where they go (`checkpoint.storage`, see [`Store`]):
//! - default: `<run-dir>/checkpoints/step-00000100/` on rank 0's host;
//! - a path or `file://` URI (a shared file system): `<storage>/<training-id>/step-…/`;
//! - `s3://bucket/prefix`: the same keys under the prefix.
//!
//! So any host can resume a training whose checkpoints are in shared storage.
//! Beside the steps, `best/` holds the state with the lowest validation loss.

mod store;

pub use cohort_spec::checkpoint::{
    step_dir_name, Manifest, SamplerState, BEST_DIR, FORMAT, MANIFEST_FILE, STATE_FILE,
};
pub use store::{latest, Found, Store};

use crate::error::RankError;
use crate::model::PARAM_NAMES;
use crate::state::{Numerics, TrainState};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::Path;
use tch::{Kind, Tensor};

/// Write `state` as a safetensors file at `path`; returns its SHA-256.
pub fn write_state(path: &Path, state: &TrainState) -> Result<String, RankError> {
    let cpu = |t: &Tensor| t.detach().to_device(tch::Device::Cpu);
    let mut named: Vec<(String, Tensor)> = Vec::new();
    for (i, name) in PARAM_NAMES.iter().enumerate() {
        named.push((format!("param.{name}"), cpu(&state.sae.params[i])));
        named.push((format!("adam.m.{name}"), cpu(&state.adam.m[i])));
        named.push((format!("adam.v.{name}"), cpu(&state.adam.v[i])));
    }
    let n = &state.numerics;
    named.push(("adam.t".into(), Tensor::from_slice(&[state.adam.t])));
    named.push(("train.step".into(), Tensor::from_slice(&[state.step])));
    named.push((
        "numerics.loss_scale".into(),
        Tensor::from_slice(&[n.loss_scale]),
    ));
    named.push((
        "numerics.counters".into(),
        Tensor::from_slice(&[
            n.good_steps,
            n.nonfinite_run,
            n.nonfinite_total,
            n.overflow_total,
        ]),
    ));
    named.push(("dead.last_fired".into(), cpu(&state.dead.last_fired)));
    named.push((
        "dead.samples_seen".into(),
        Tensor::from_slice(&[state.dead.samples_seen]),
    ));
    Tensor::write_safetensors(&named, path).map_err(|e| io("write", path, e))?;
    sha256_file(path)
}

/// The SHA-256 of a file, hex.
pub fn sha256_file(path: &Path) -> Result<String, RankError> {
    let mut file = std::fs::File::open(path).map_err(|e| io("read", path, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(|e| io("read", path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(format!("{:x}", hasher.finalize()))
}

pub(crate) fn io(context: &str, path: &Path, e: impl std::fmt::Display) -> RankError {
    RankError::Checkpoint(format!("{context} {}: {e}", path.display()))
}

/// A checkpoint that can't be used: why, for the warning.
#[derive(Debug)]
pub struct Corrupt(pub String);

/// Load a checkpoint's state file into `state`, verifying it against its
/// manifest (state file digest, parameter checksum). `where_` names the
/// checkpoint in messages. A shape that does not match the config is a
/// config error; anything unreadable or mismatched is [`Corrupt`].
pub fn restore_file(
    path: &Path,
    where_: &str,
    manifest: &Manifest,
    state: &mut TrainState,
) -> Result<Result<(), Corrupt>, RankError> {
    if let Some(expected) = &manifest.state_sha256 {
        let actual = match sha256_file(path) {
            Ok(d) => d,
            Err(e) => return Ok(Err(Corrupt(e.to_string()))),
        };
        if &actual != expected {
            return Ok(Err(Corrupt(format!(
                "{where_}: the state file's SHA-256 is {actual}, the manifest says {expected}"
            ))));
        }
    }
    let tensors = match Tensor::read_safetensors(path) {
        Ok(t) => t,
        Err(e) => return Ok(Err(Corrupt(format!("{where_}: {e}")))),
    };
    let get = |name: &str| tensors.iter().find(|(n, _)| n == name).map(|(_, t)| t);
    let missing = |name: &str| Corrupt(format!("{where_}: missing tensor {name}"));
    let copied = tch::no_grad(|| -> Result<Result<(), Corrupt>, RankError> {
        for (i, name) in PARAM_NAMES.iter().enumerate() {
            for (dst, key) in [
                (&mut state.sae.params[i], format!("param.{name}")),
                (&mut state.adam.m[i], format!("adam.m.{name}")),
                (&mut state.adam.v[i], format!("adam.v.{name}")),
            ] {
                let Some(src) = get(&key) else {
                    return Ok(Err(missing(&key)));
                };
                if src.size() != dst.size() {
                    return Err(shape_mismatch(where_, &key, src, dst));
                }
                dst.copy_(&src.to_kind(dst.kind()));
            }
        }
        Ok(Ok(()))
    })?;
    if let Err(e) = copied {
        return Ok(Err(e));
    }
    let scalar = |name: &str| get(name).map(|t| t.int64_value(&[0]));
    // Checkpoints of before the schedule kept one counter, "adam.step".
    let Some(step) = scalar("train.step").or_else(|| scalar("adam.step")) else {
        return Ok(Err(missing("train.step")));
    };
    state.step = step;
    state.adam.t = scalar("adam.t").unwrap_or(step);
    // Older checkpoints hold no numerics: keep the configured scale, zero counters.
    let loss_scale = get("numerics.loss_scale")
        .map(|t| t.double_value(&[0]))
        .unwrap_or(state.numerics.loss_scale);
    let counters = get("numerics.counters")
        .and_then(|t| Vec::<i64>::try_from(t).ok())
        .filter(|c| c.len() == 4)
        .unwrap_or(vec![0; 4]);
    state.numerics = Numerics {
        loss_scale,
        good_steps: counters[0],
        nonfinite_run: counters[1],
        nonfinite_total: counters[2],
        overflow_total: counters[3],
    };
    match get("dead.last_fired") {
        Some(t) if t.size() == state.dead.last_fired.size() => {
            state.dead.last_fired = t
                .to_kind(Kind::Int64)
                .to_device(state.dead.last_fired.device());
        }
        _ => {
            let _ = state.dead.last_fired.fill_(-1);
        }
    }
    state.dead.samples_seen = scalar("dead.samples_seen").unwrap_or(0);
    let checksum = state.sae.checksum();
    if checksum != manifest.param_checksum {
        return Ok(Err(Corrupt(format!(
            "{where_}: the parameters' checksum is {checksum}, the manifest says {}",
            manifest.param_checksum
        ))));
    }
    Ok(Ok(()))
}

fn shape_mismatch(where_: &str, key: &str, src: &Tensor, dst: &Tensor) -> RankError {
    RankError::Config(cohort_spec::ConfigError::Invalid {
        field: "model".into(),
        reason: format!(
            "checkpoint {} has {key} of shape {:?}, the config wants {:?}",
            where_,
            src.size(),
            dst.size()
        ),
    })
}
