#!/usr/bin/env bash
# By hand, never in CI: loads a `cohort checkpoints download --format saelens`
# directory with the real sae-lens (which pulls its own torch, ~6 GB, so it
# lives in its own venv, never the project's) and compares its reconstruction
# of random activations with ours computed from the native download.
#
#   scripts/check-saelens.sh NATIVE_DIR SAELENS_DIR [VENV_DIR]
set -euo pipefail
native="$1"; exported="$2"; venv="${3:-/tmp/cohort-saelens-venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -c "import sae_lens" 2>/dev/null || "$venv/bin/pip" install -q --disable-pip-version-check sae-lens
"$venv/bin/python" - "$native" "$exported" <<'PY'
import sys
import numpy as np
import sae_lens
import torch
from safetensors.numpy import load_file
from sae_lens import SAE

native, exported = sys.argv[1], sys.argv[2]
sae = SAE.load_from_disk(exported, device="cpu")
st = load_file(f"{native}/state.safetensors")
w_enc, b_enc, w_dec, b_dec = (st[f"param.{n}"].astype(np.float32) for n in ["w_enc", "b_enc", "w_dec", "b_dec"])
x = np.random.default_rng(0).standard_normal((128, w_enc.shape[1])).astype(np.float32)
ours = np.maximum(x @ w_enc.T + b_enc, 0) @ w_dec.T + b_dec
with torch.no_grad():
    theirs = sae.decode(sae.encode(torch.from_numpy(x))).numpy()
diff = float(np.abs(ours - theirs).max())
print(f"sae_lens {sae_lens.__version__} (torch {torch.__version__}) loaded {type(sae).__name__}; "
      f"max |reconstruction difference| {diff:.2e} (max |x_hat| {float(np.abs(ours).max()):.2f})")
sys.exit(0 if diff <= 1e-5 * max(1.0, float(np.abs(ours).max())) else 1)
PY
