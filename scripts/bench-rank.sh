#!/usr/bin/env bash
# Benchmark: cohort-rank vs PyTorch (eager, DDP gloo) on CPU. Args go to bench/rank/bench.py.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
source scripts/env.sh
cargo build --release --locked -p cohort-rank
python bench/rank/bench.py "$@"
