//! Summing a flat f32 buffer across ranks in buckets of at most
//! `runtime.bucket_mb`, each its own collective started at once, in the
//! dtype of `runtime.allreduce_dtype` (bf16 halves the bytes on the wire;
//! the sum comes back into the f32 buffer).

use crate::dist::{Pending, ProcessGroup};
use crate::error::RankError;
use cohort_spec::config::{AllreduceDtype, RuntimeConfig};
use tch::{Kind, Tensor};

/// The wire dtype of `runtime`.
pub fn wire_kind(runtime: &RuntimeConfig) -> Kind {
    match runtime.allreduce_dtype {
        AllreduceDtype::F32 => Kind::Float,
        AllreduceDtype::Bf16 => Kind::BFloat16,
    }
}

/// Elements of `kind` in one bucket of `bucket_mb` MiB (at least 1).
pub fn bucket_elements(bucket_mb: f64, kind: Kind) -> i64 {
    let bytes = match kind {
        Kind::BFloat16 | Kind::Half => 2.0,
        _ => 4.0,
    };
    ((bucket_mb * 1024.0 * 1024.0 / bytes) as i64).max(1)
}

/// Collectives in flight over one flat buffer.
pub struct InFlight<'g> {
    flat: Tensor,
    wire: Tensor,
    /// The bucket views, alive until their collectives are waited for.
    _chunks: Vec<Tensor>,
    pending: Vec<Pending<'g>>,
}

/// Starts summing `flat` (f32) across the group's ranks in buckets of at
/// most `bucket` elements of `kind`.
pub fn start<'g>(
    group: &'g ProcessGroup,
    flat: Tensor,
    kind: Kind,
    bucket: i64,
) -> Result<InFlight<'g>, RankError> {
    let wire = if kind == Kind::Float {
        flat.shallow_clone()
    } else {
        flat.f_to_kind(kind)?
    };
    let n = wire.numel() as i64;
    let mut chunks = Vec::new();
    let mut pending = Vec::new();
    let mut offset = 0;
    while offset < n {
        let len = bucket.min(n - offset);
        let mut chunk = wire.narrow(0, offset, len);
        pending.push(group.allreduce_start(&mut chunk)?);
        chunks.push(chunk);
        offset += len;
    }
    Ok(InFlight {
        flat,
        wire,
        _chunks: chunks,
        pending,
    })
}

impl InFlight<'_> {
    /// Waits for every bucket; the f32 buffer holding the sums.
    pub fn finish(self) -> Result<Tensor, RankError> {
        for p in self.pending {
            p.wait()?;
        }
        let mut flat = self.flat;
        if self.wire.kind() != Kind::Float {
            tch::no_grad(|| flat.f_copy_(&self.wire))?;
        }
        Ok(flat)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_hold_the_configured_bytes() {
        assert_eq!(bucket_elements(25.0, Kind::Float), 25 * 1024 * 1024 / 4);
        assert_eq!(bucket_elements(25.0, Kind::BFloat16), 25 * 1024 * 1024 / 2);
        assert_eq!(bucket_elements(1e-9, Kind::Float), 1);
    }
}
