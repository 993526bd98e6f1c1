"""Checks a checkpoint downloaded natively and for SAELens, the way another
tool would read them (numpy + safetensors only; no cohort code):

    check_export.py NATIVE_DIR SAELENS_DIR

- native: manifest.json and state.safetensors with param.{w_enc,b_enc,w_dec,b_dec}
  and adam.*; the parameters hash to the manifest's param_checksum (FNV-1a of
  their f32 bytes, in that order);
- SAELens: cfg.json with the keys sae_lens.SAE.load_from_disk reads and
  sae_weights.safetensors with W_enc [d_in, d_sae], W_dec [d_sae, d_in],
  b_enc [d_sae], b_dec [d_in];
- the reconstruction of random activations through SAELens' forward pass on
  the exported weights equals ours on the native ones (relu or topk with its
  k; x - b_dec first when apply_b_dec_to_input).
Prints what it checked; exits non-zero on the first mismatch.
"""
import json
import sys

import numpy as np
from safetensors.numpy import load_file


def fnv1a(arrays):
    h = 0xCBF29CE484222325
    for a in arrays:
        for b in np.ascontiguousarray(a, dtype="<f4").tobytes():
            h ^= b
            h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def main(native, saelens):
    manifest = json.load(open(f"{native}/manifest.json"))
    state = load_file(f"{native}/state.safetensors")
    names = ["w_enc", "b_enc", "w_dec", "b_dec"]
    params = [state[f"param.{n}"].astype(np.float32) for n in names]
    for n in names:
        assert f"adam.m.{n}" in state and f"adam.v.{n}" in state, n
    assert fnv1a(params) == manifest["param_checksum"], "checksum"
    w_enc, b_enc, w_dec, b_dec = params
    d_sae, d_in = w_enc.shape
    assert (manifest["d_in"], manifest["d_sae"]) == (d_in, d_sae)

    cfg = json.load(open(f"{saelens}/cfg.json"))
    for key in ["architecture", "d_in", "d_sae", "dtype", "apply_b_dec_to_input", "normalize_activations"]:
        assert key in cfg, f"cfg.json lacks {key}"
    assert cfg["architecture"] == {"relu": "standard", "topk": "topk"}[manifest["architecture"]]
    assert (cfg["d_in"], cfg["d_sae"]) == (d_in, d_sae)
    assert cfg["normalize_activations"] == "none" and cfg["dtype"] == "float32"
    w = load_file(f"{saelens}/sae_weights.safetensors")
    assert sorted(w) == ["W_dec", "W_enc", "b_dec", "b_enc"], sorted(w)
    assert w["W_enc"].shape == (d_in, d_sae) and w["W_dec"].shape == (d_sae, d_in)
    assert w["b_enc"].shape == (d_sae,) and w["b_dec"].shape == (d_in,)
    assert all(v.dtype == np.float32 for v in w.values())

    if manifest["architecture"] == "topk":
        assert cfg["k"] == manifest["k"], "k"

    def activate(pre, k):
        z = np.maximum(pre, 0)
        if k is not None:
            # keep each row's k largest, as both forward passes do
            drop = np.argsort(-z, axis=1)[:, k:]
            np.put_along_axis(z, drop, 0, axis=1)
        return z

    k = manifest.get("k") if manifest["architecture"] == "topk" else None
    x = np.random.default_rng(0).standard_normal((64, d_in)).astype(np.float32)
    ours_in = x - b_dec if manifest.get("apply_b_dec_to_input") else x
    ours = activate(ours_in @ w_enc.T + b_enc, k) @ w_dec.T + b_dec
    xin = x - w["b_dec"] if cfg["apply_b_dec_to_input"] else x
    theirs = activate(xin @ w["W_enc"] + w["b_enc"], cfg.get("k")) @ w["W_dec"] + w["b_dec"]
    diff = float(np.abs(ours - theirs).max())
    assert diff <= 1e-5 * max(1.0, float(np.abs(ours).max())), diff
    print(f"ok: step {manifest['step']}, d_in {d_in}, d_sae {d_sae}, checksum {manifest['param_checksum']}, "
          f"max |reconstruction difference| {diff:.2e}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
