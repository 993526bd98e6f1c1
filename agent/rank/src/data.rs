//! Training data: activation shards (.npy / .safetensors files of [N, d_in]) or
//! the deterministic synthetic source. Either way the whole set is loaded as
//! one [N, d_in] float tensor on the training device, and batches are gathered
//! from it by the sampler's indices.

use crate::error::RankError;
use cohort_spec::config::{FileData, SyntheticData};
use std::path::Path;
use tch::{Device, Kind, Tensor};

/// Rows of synthetic data generated per chunk (bounds peak memory).
const SYNTHETIC_CHUNK: i64 = 8192;

pub struct Dataset {
    pub samples: Tensor,
}

impl Dataset {
    pub fn rows(&self) -> i64 {
        self.samples.size()[0]
    }

    /// Gather the rows at `indices` as a [B, d_in] batch of `kind`.
    pub fn batch(&self, indices: &[i64], kind: Kind) -> Tensor {
        let idx = Tensor::from_slice(indices).to_device(self.samples.device());
        self.samples.index_select(0, &idx).to_kind(kind)
    }

    /// Sparse combinations of random unit-norm features plus dense noise. The
    /// same `seed` gives the same data on every rank.
    pub fn synthetic(cfg: &SyntheticData, d_in: i64, seed: u64, device: Device) -> Self {
        tch::manual_seed(seed as i64 ^ 0x5EED_DA7A);
        let opts = (Kind::Float, Device::Cpu);
        let features = Tensor::randn([cfg.num_features, d_in], opts);
        let norms = features.norm_scalaropt_dim(2, [1], true);
        let features = features / norms;
        let mut chunks = Vec::new();
        let mut done = 0;
        while done < cfg.num_samples {
            let rows = SYNTHETIC_CHUNK.min(cfg.num_samples - done);
            let active = Tensor::rand([rows, cfg.num_features], opts)
                .lt(cfg.feature_probability)
                .to_kind(Kind::Float);
            let magnitude = Tensor::rand([rows, cfg.num_features], opts) * 2.0 + 0.5;
            let codes = active * magnitude;
            let noise = Tensor::randn([rows, d_in], opts) * cfg.noise_std;
            chunks.push(codes.matmul(&features) + noise);
            done += rows;
        }
        Self {
            samples: Tensor::cat(&chunks, 0).to_device(device),
        }
    }

    /// Load and concatenate activation shards, checking each one's shape.
    pub fn from_files(cfg: &FileData, d_in: i64, device: Device) -> Result<Self, RankError> {
        let mut parts = Vec::with_capacity(cfg.paths.len());
        for path in &cfg.paths {
            let t = read_shard(path, cfg.tensor.as_deref())?;
            let size = t.size();
            if size.len() != 2 {
                return Err(RankError::Data(format!(
                    "{}: expected a 2-D array [N, d_in], found shape {size:?}",
                    path.display()
                )));
            }
            if size[0] == 0 {
                return Err(RankError::Data(format!("{}: has no rows", path.display())));
            }
            if size[1] != d_in {
                return Err(RankError::Data(format!(
                    "{}: rows have {} values but model.d_in is {d_in}",
                    path.display(),
                    size[1]
                )));
            }
            if !matches!(
                t.kind(),
                Kind::Float | Kind::Double | Kind::Half | Kind::BFloat16
            ) {
                return Err(RankError::Data(format!(
                    "{}: element type {:?} is not a float type",
                    path.display(),
                    t.kind()
                )));
            }
            parts.push(t.to_kind(Kind::Float));
        }
        Ok(Self {
            samples: Tensor::cat(&parts, 0).to_device(device),
        })
    }
}

fn read_shard(path: &Path, name: Option<&str>) -> Result<Tensor, RankError> {
    let meta =
        std::fs::metadata(path).map_err(|e| RankError::Data(format!("{}: {e}", path.display())))?;
    if meta.len() == 0 {
        return Err(RankError::Data(format!(
            "{}: file is empty",
            path.display()
        )));
    }
    let bad = |e: tch::TchError| RankError::Data(format!("{}: {e}", path.display()));
    if path.extension().is_some_and(|e| e == "npy") {
        return Tensor::read_npy(path).map_err(bad);
    }
    let mut tensors = Tensor::read_safetensors(path).map_err(bad)?;
    match name {
        Some(name) => tensors
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t)
            .ok_or_else(|| {
                RankError::Data(format!("{}: has no tensor named {name:?}", path.display()))
            }),
        None if tensors.len() == 1 => Ok(tensors.remove(0).1),
        None => Err(RankError::Data(format!(
            "{}: holds {} tensors; name one with data.files.tensor",
            path.display(),
            tensors.len()
        ))),
    }
}
