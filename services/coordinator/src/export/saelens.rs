//! The SAELens layout of a checkpoint (what `sae_lens.SAE.load_from_disk`
//! reads): `cfg.json` and `sae_weights.safetensors` holding `W_enc [d_in,
//! d_sae]`, `W_dec [d_sae, d_in]`, `b_enc [d_sae]`, `b_dec [d_in]` in f32.
//! Ours stores `w_enc [d_sae, d_in]` and `w_dec [d_in, d_sae]` (the layout of
//! torch's Linear), so both matrices are transposed; the forward pass is the
//! same: z = ReLU(x W_enc + b_enc) (x - b_dec when apply_b_dec_to_input),
//! x_hat = z W_dec + b_dec.

use super::ExportError;
use cohort_spec::checkpoint::Manifest;
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use serde_json::json;
use std::path::Path;

pub const CFG: &str = "cfg.json";
pub const WEIGHTS: &str = "sae_weights.safetensors";

fn bad(e: impl std::fmt::Display) -> ExportError {
    ExportError::Malformed(format!("checkpoint state: {e}"))
}

/// A tensor of the state as f32 values with its shape.
fn f32_tensor(st: &SafeTensors, name: &str) -> Result<(Vec<f32>, Vec<usize>), ExportError> {
    let t = st.tensor(name).map_err(|e| bad(format!("{name}: {e:?}")))?;
    let data = t.data();
    let values: Vec<f32> = match t.dtype() {
        Dtype::F32 => data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::BF16 => data
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        Dtype::F16 => data
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        other => return Err(bad(format!("{name} has type {other:?}"))),
    };
    Ok((values, t.shape().to_vec()))
}

fn transpose(values: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0f32; values.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = values[r * cols + c];
        }
    }
    out
}

fn bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Write `cfg.json` and `sae_weights.safetensors` into `out` from the native
/// state file and manifest. Blocking: the API runs it on a blocking thread.
#[allow(clippy::disallowed_methods)]
pub fn convert(state: &Path, manifest: &Manifest, out: &Path) -> Result<(), ExportError> {
    let raw = std::fs::read(state)
        .map_err(|e| ExportError::Storage(format!("{}: {e}", state.display())))?;
    let st = SafeTensors::deserialize(&raw).map_err(|e| bad(format!("{e:?}")))?;
    let (w_enc, enc_shape) = f32_tensor(&st, "param.w_enc")?;
    let (b_enc, _) = f32_tensor(&st, "param.b_enc")?;
    let (w_dec, dec_shape) = f32_tensor(&st, "param.w_dec")?;
    let (b_dec, _) = f32_tensor(&st, "param.b_dec")?;
    let [d_sae, d_in] = enc_shape[..] else {
        return Err(bad(format!("param.w_enc has shape {enc_shape:?}")));
    };
    if dec_shape != [d_in, d_sae] || b_enc.len() != d_sae || b_dec.len() != d_in {
        return Err(bad("the decoder's shapes do not match the encoder's"));
    }
    let sae_architecture = match manifest.architecture.as_str() {
        "relu" => "standard",
        "topk" => "topk",
        other => {
            return Err(bad(format!(
                "architecture {other:?} has no SAELens equivalent"
            )))
        }
    };
    let w_enc_t = bytes(&transpose(&w_enc, d_sae, d_in));
    let w_dec_t = bytes(&transpose(&w_dec, d_in, d_sae));
    let (b_enc, b_dec) = (bytes(&b_enc), bytes(&b_dec));
    fn view(data: &[u8], shape: Vec<usize>) -> Result<TensorView<'_>, ExportError> {
        TensorView::new(Dtype::F32, shape, data).map_err(|e| bad(format!("{e:?}")))
    }
    let tensors = vec![
        ("W_enc", view(&w_enc_t, vec![d_in, d_sae])?),
        ("W_dec", view(&w_dec_t, vec![d_sae, d_in])?),
        ("b_enc", view(&b_enc, vec![d_sae])?),
        ("b_dec", view(&b_dec, vec![d_in])?),
    ];
    let weights = out.join(WEIGHTS);
    safetensors::serialize_to_file(tensors, &None, &weights)
        .map_err(|e| ExportError::Storage(format!("{}: {e:?}", weights.display())))?;
    let mut cfg = json!({
        "architecture": sae_architecture,
        "d_in": d_in,
        "d_sae": d_sae,
        "dtype": "float32",
        "device": "cpu",
        "apply_b_dec_to_input": manifest.apply_b_dec_to_input,
        "normalize_activations": "none",
        "metadata": {
            "model_name": "cohort",
            "cohort_step": manifest.step,
        },
    });
    if sae_architecture == "topk" {
        cfg["k"] = json!(manifest.k);
    }
    let path = out.join(CFG);
    std::fs::write(&path, serde_json::to_vec_pretty(&cfg).expect("json"))
        .map_err(|e| ExportError::Storage(format!("{}: {e}", path.display())))
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    #[test]
    fn transposes_into_saelens_names_and_shapes() {
        let dir = tempfile::tempdir().unwrap();
        // d_sae 3, d_in 2: w_enc [3, 2], w_dec [2, 3].
        let w_enc = bytes(&[1., 2., 3., 4., 5., 6.]);
        let w_dec = bytes(&[7., 8., 9., 10., 11., 12.]);
        let (b_enc, b_dec) = (bytes(&[0.1, 0.2, 0.3]), bytes(&[0.5, 0.6]));
        let state = dir.path().join("state.safetensors");
        safetensors::serialize_to_file(
            vec![
                (
                    "param.w_enc",
                    TensorView::new(Dtype::F32, vec![3, 2], &w_enc).unwrap(),
                ),
                (
                    "param.w_dec",
                    TensorView::new(Dtype::F32, vec![2, 3], &w_dec).unwrap(),
                ),
                (
                    "param.b_enc",
                    TensorView::new(Dtype::F32, vec![3], &b_enc).unwrap(),
                ),
                (
                    "param.b_dec",
                    TensorView::new(Dtype::F32, vec![2], &b_dec).unwrap(),
                ),
            ],
            &None,
            &state,
        )
        .unwrap();
        let out = dir.path().join("sae");
        std::fs::create_dir(&out).unwrap();
        let manifest = Manifest::parse(
            br#"{"format":"cohort-sae-checkpoint/1","step":7,"epoch":0,"world_size":1,
                "global_batch":4,"d_in":2,"d_sae":3,"dtype":"f32","param_checksum":"x",
                "files":["state.safetensors"]}"#,
        )
        .unwrap();
        convert(&state, &manifest, &out).unwrap();
        let raw = std::fs::read(out.join(WEIGHTS)).unwrap();
        let st = SafeTensors::deserialize(&raw).unwrap();
        let (w, shape) = f32_tensor(&st, "W_enc").unwrap();
        assert_eq!(shape, [2, 3]);
        assert_eq!(w, [1., 3., 5., 2., 4., 6.]);
        let (w, shape) = f32_tensor(&st, "W_dec").unwrap();
        assert_eq!(shape, [3, 2]);
        assert_eq!(w, [7., 10., 8., 11., 9., 12.]);
        let cfg: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join(CFG)).unwrap()).unwrap();
        assert_eq!(cfg["architecture"], "standard");
        assert_eq!(
            (cfg["d_in"].as_u64(), cfg["d_sae"].as_u64()),
            (Some(2), Some(3))
        );
        assert_eq!(cfg["apply_b_dec_to_input"], false);
        assert_eq!(cfg["normalize_activations"], "none");
    }
}
