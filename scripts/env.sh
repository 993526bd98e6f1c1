# Sourced by the scripts: the project-local PyTorch venv that tch builds against.
# shellcheck shell=bash
COHORT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export COHORT_ROOT
export COHORT_VENV="${COHORT_VENV:-$COHORT_ROOT/.venv}"
export PATH="$COHORT_VENV/bin:$HOME/.cargo/bin:$PATH"
export LIBTORCH_USE_PYTORCH=1
export LIBTORCH_BYPASS_VERSION_CHECK=0
