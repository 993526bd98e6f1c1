#!/usr/bin/env bash
# The GPU path, on a machine with an NVIDIA GPU: the CUDA tests of
# cohort-rank (CUDA-event timings, NCCL across two GPUs where there are
# two), the host doctor, a 1-GPU SAE training through a real coordinator and
# agent (and a 2-GPU one over NCCL where there are two GPUs), and the rank
# benchmark against PyTorch at d_in 768 -> d_sae 24576 in bf16 (achieved
# TFLOP/s and fraction of peak). Writes everything it prints to
# $OUT/check-gpu.log (or ./check-gpu.log).
#
#   bash scripts/check-gpu.sh            # builds first (scripts/setup.sh, cargo)
#   COHORT_PREBUILT=1 bash scripts/check-gpu.sh
#       uses target/release's binaries and target/release/cuda-tests (built
#       elsewhere: `bash scripts/check-gpu.sh build`), the python3 on PATH
#       for torch, and its libtorch for cohort-rank: for GPU machines
#       without the registries.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
LOG="${OUT:-.}/check-gpu.log"

if [[ "${1:-}" == build ]]; then
  # Build the release binaries and the CUDA test executable to carry.
  bash scripts/setup.sh
  source scripts/env.sh
  cargo build --release --locked --bins
  exe=$(cargo test --release --locked -p cohort-rank --test cuda --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "cuda":
        print(m["executable"])')
  cp "$exe" target/release/cuda-tests
  echo "check-gpu: built target/release/{cohort-coordinator,cohort-agent,cohort,cohort-rank,cuda-tests}"
  exit 0
fi

exec > >(tee "$LOG") 2>&1
echo "check-gpu: $(date -u +%FT%TZ) on $(hostname)"
if ! nvidia-smi -L; then
  echo "check-gpu: FAILED: no NVIDIA GPU here (nvidia-smi -L failed)"
  exit 1
fi
if [[ "${COHORT_PREBUILT:-0}" == 1 ]]; then
  PYTHON="${PYTHON:-python3}"
  TORCH_LIB="$("$PYTHON" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')"
  export LD_LIBRARY_PATH="$TORCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  CUDA_TESTS=target/release/cuda-tests
else
  bash scripts/check-gpu.sh build
  source scripts/env.sh
  PYTHON="$COHORT_VENV/bin/python"
  CUDA_TESTS=target/release/cuda-tests
fi
BIN=target/release
GPUS=$(nvidia-smi -L | wc -l)
status=0
step() { echo; echo "== $*"; }

step "cohort-rank's CUDA tests"
COHORT_RANK_BIN="$BIN/cohort-rank" "$CUDA_TESTS" --ignored --test-threads 1 || status=1

step "the host doctor"
"$BIN/cohort-agent" doctor --rank-binary "$BIN/cohort-rank" || status=1
"$BIN/cohort-agent" doctor --json --rank-binary "$BIN/cohort-rank" > "${OUT:-.}/doctor.json" || true

step "SAE trainings through a coordinator and an agent"
WORK=$(mktemp -d)
"$BIN/cohort-coordinator" --listen 127.0.0.1:50551 --data-dir "$WORK/coordinator" > "$WORK/coordinator.log" 2>&1 &
COORD=$!
"$BIN/cohort-agent" --coordinator http://127.0.0.1:50551 --name gpu-host --address 127.0.0.1 \
  --work-dir "$WORK/agent" --rank-binary "$BIN/cohort-rank" > "$WORK/agent.log" 2>&1 &
AGENT=$!
trap 'kill $AGENT $COORD 2>/dev/null || true' EXIT
export COHORT_COORDINATOR=http://127.0.0.1:50551
for _ in $(seq 60); do "$BIN/cohort" gpus >/dev/null 2>&1 && break; sleep 1; done
"$BIN/cohort" gpus
cat > "$WORK/sae.toml" <<TOML
[model]
d_in = 768
d_sae = 24576
dtype = "bf16"
[optim]
batch_size = 4096
steps = 300
[checkpoint]
every_steps = 100
[data.synthetic]
num_samples = 262144
num_features = 4096
[runtime]
device = "cuda"
log_every_steps = 20
TOML
for n in 1 2; do
  if (( n > GPUS )); then echo "SKIPPED: the $n-GPU training (this host has $GPUS GPU)"; continue; fi
  id=$("$BIN/cohort" train submit --config "$WORK/sae.toml" --gpus "$n" --quiet)
  if "$BIN/cohort" train watch "$id"; then
    "$BIN/cohort" train report "$id" || true
  else
    status=1
    tail -40 "$WORK/agent.log"
  fi
done

step "the rank benchmark against PyTorch (bf16, d_in 768 -> d_sae 24576)"
"$PYTHON" bench/rank/bench.py --device cuda --dtype bf16 --d-in 768 --d-sae 24576 --batch 4096 \
  --steps 200 --warmup 20 --samples 262144 --repeat 2 || status=1

echo
if (( status == 0 )); then echo "check-gpu: every step passed"; else echo "check-gpu: FAILED (see above)"; fi
exit "$status"
