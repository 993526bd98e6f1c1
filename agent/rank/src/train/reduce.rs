//! Gradient synchronisation: every gradient (f32) and the step's extras
//! (its losses and which latents fired) summed across ranks in one
//! coalesced collective (`flat`), one per tensor (`per_param`), or in
//! buckets of at most `runtime.bucket_mb` with the decoder's in flight
//! while the encoder's are computed (`overlap`). With `allreduce_dtype =
//! "bf16"` the gradients travel in bf16 (the extras, counts among them,
//! stay f32). Sums, not means: the step divides.

use super::buckets;
use super::Trainer;
use crate::error::RankError;
use crate::model::Forward;
use crate::timing::Span;
use cohort_spec::config::AllreduceMode;
use std::time::Duration;
use tch::{Kind, Tensor};

/// Gradients and extras summed over the ranks, and the time it took.
pub struct Reduced {
    pub grads: Vec<Tensor>,
    pub extras: Tensor,
    pub comm: Duration,
}

fn flatten(ts: &[&Tensor]) -> (Tensor, Vec<i64>) {
    let parts: Vec<Tensor> = ts
        .iter()
        .map(|t| t.flatten(0, -1).to_kind(Kind::Float))
        .collect();
    let sizes = parts.iter().map(|p| p.numel() as i64).collect();
    (Tensor::cat(&parts, 0), sizes)
}

fn unflatten(flat: &Tensor, sizes: &[i64], like: &[&Tensor]) -> Vec<Tensor> {
    flat.split_with_sizes(sizes, 0)
        .into_iter()
        .zip(like)
        .map(|(part, t)| part.view_as(t))
        .collect()
}

impl Trainer<'_> {
    /// Sum `grads` and `extras` across ranks.
    pub(super) fn reduce(&self, grads: Vec<Tensor>, extras: Tensor) -> Result<Reduced, RankError> {
        let Some(group) = &self.group else {
            return Ok(Reduced {
                grads,
                extras,
                comm: Duration::ZERO,
            });
        };
        match self.cfg.runtime.allreduce {
            AllreduceMode::Flat | AllreduceMode::Overlap
                if buckets::wire_kind(&self.cfg.runtime) != Kind::Float =>
            {
                let like: Vec<&Tensor> = grads.iter().collect();
                let (flat, sizes) = flatten(&like);
                let mut extras = extras.to_kind(Kind::Float);
                let span = Span::begin(self.device);
                let kind = buckets::wire_kind(&self.cfg.runtime);
                let in_flight = buckets::start(group, flat, kind, i64::MAX)?;
                group.allreduce_sum(&mut [&mut extras], false)?;
                let flat = in_flight.finish()?;
                let comm = span.end();
                Ok(Reduced {
                    grads: unflatten(&flat, &sizes, &like),
                    extras,
                    comm,
                })
            }
            AllreduceMode::Flat | AllreduceMode::Overlap => {
                let mut like: Vec<&Tensor> = grads.iter().collect();
                like.push(&extras);
                let (mut flat, sizes) = flatten(&like);
                let span = Span::begin(self.device);
                group.allreduce_sum(&mut [&mut flat], true)?;
                let comm = span.end();
                let mut pieces = unflatten(&flat, &sizes, &like);
                let extras = pieces.pop().expect("extras piece");
                Ok(Reduced {
                    grads: pieces,
                    extras,
                    comm,
                })
            }
            AllreduceMode::PerParam => {
                let mut grads: Vec<Tensor> =
                    grads.into_iter().map(|g| g.to_kind(Kind::Float)).collect();
                let mut extras = extras;
                let span = Span::begin(self.device);
                {
                    let mut all: Vec<&mut Tensor> = grads.iter_mut().collect();
                    all.push(&mut extras);
                    group.allreduce_sum(&mut all, false)?;
                }
                Ok(Reduced {
                    grads,
                    extras,
                    comm: span.end(),
                })
            }
        }
    }

    /// Backward and reduce with the decoder's gradients in flight while the
    /// encoder's are computed: d(loss)/dz is taken with the decoder's
    /// gradients, and the encoder's follow from the surrogate sum(z * dz),
    /// whose gradient is exactly the chain rule through z (the loss reaches
    /// the encoder only through z: no auxiliary loss).
    pub(super) fn backward_overlapped(
        &self,
        loss: &Tensor,
        f: &Forward,
        extras: Tensor,
    ) -> Result<Reduced, RankError> {
        let group = self.group.as_ref().expect("overlap needs a group");
        let p = &self.state.sae.params;
        let dec = Tensor::run_backward(&[loss], &[&p[2], &p[3], &f.z], true, false);
        let dz = dec[2].detach();
        let kind = buckets::wire_kind(&self.cfg.runtime);
        let bucket = buckets::bucket_elements(self.cfg.runtime.bucket_mb, kind);
        let (bucket_dec, dec_sizes) = flatten(&[&dec[0], &dec[1]]);
        let span = Span::begin(self.device);
        let dec_in_flight = buckets::start(group, bucket_dec, kind, bucket)?;
        let mut comm = span.end();
        let surrogate = (&f.z * &dz).sum(Kind::Float);
        let enc = Tensor::run_backward(&[&surrogate], &[&p[0], &p[1]], false, false);
        let (bucket_enc, enc_sizes) = flatten(&[&enc[0], &enc[1]]);
        let mut extras = extras.to_kind(Kind::Float);
        let span = Span::begin(self.device);
        let enc_in_flight = buckets::start(group, bucket_enc, kind, bucket)?;
        let pending_extras = group.allreduce_start(&mut extras)?;
        let bucket_dec = dec_in_flight.finish()?;
        let bucket_enc = enc_in_flight.finish()?;
        pending_extras.wait()?;
        comm += span.end();
        let enc = unflatten(&bucket_enc, &enc_sizes, &[&enc[0], &enc[1]]);
        let dec = unflatten(&bucket_dec, &dec_sizes, &[&dec[0], &dec[1]]);
        Ok(Reduced {
            grads: enc.into_iter().chain(dec).collect(),
            extras,
            comm,
        })
    }
}
