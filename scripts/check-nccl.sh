#!/usr/bin/env bash
# Compiles cohort-rank's NCCL path (the `nccl` feature: ProcessGroupNCCL) against
# the NCCL headers torch pins and the CUDA 13 headers from PyPI wheels. Runs on
# a machine without a GPU; running NCCL needs one. Pass `build` to link a binary
# (target/debug/cohort-rank) instead of only checking.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
source scripts/env.sh
"$COHORT_VENV/bin/pip" install -q --disable-pip-version-check "nvidia-cuda-crt==13.0.*" "nvidia-cuda-cccl==13.0.*"
NV="$("$COHORT_VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/nvidia"
export COHORT_CUDA_INCLUDE="$NV/cu13/include:$NV/cu13/include/cccl:$NV/nccl/include"
cargo "${1:-check}" -p cohort-rank --features nccl
