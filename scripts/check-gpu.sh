#!/usr/bin/env bash
# The GPU path, on a machine with an NVIDIA GPU: the CUDA tests of
# cohort-rank (CUDA-event timings, NCCL across two GPUs where there are
# two), the host doctor, a 1-GPU SAE training through a real coordinator and
# agent (and a 2-GPU one over NCCL where there are two GPUs), and the rank
# benchmark against PyTorch at d_in 768 -> d_sae 24576 in bf16 (achieved
# TFLOP/s and fraction of peak). Writes everything it prints to
# $OUT/check-gpu.log (or ./check-gpu.log).
#
# On a GPU machine that reaches no package registry and takes few files
# (ours: 64 MiB carried, the source tree included), carry one bundle:
#
#   bash scripts/check-gpu.sh bundle
#       here: builds the release binaries and the CUDA test executable,
#       strips them and packs .gpu-bundle/cohort-gpu.tar.xz (at most 48 MiB,
#       under an ignored path: carry `.gpu-bundle`)
#   rm -rf /tmp/cohort-gpu && mkdir -p /tmp/cohort-gpu && tar -xJf .gpu-bundle/cohort-gpu.tar.xz -C /tmp/cohort-gpu && bash /tmp/cohort-gpu/scripts/check-gpu.sh
#       there, the one command: unpacks into an empty directory and runs
#       the check against that machine's own PyTorch 2.11 (the python3 on
#       PATH, or $PYTHON): cohort-rank loads its libtorch
#   bash scripts/check-gpu.sh cpu
#       in an unpacked bundle on a machine without a GPU (PYTHON naming a
#       python with torch 2.11): its CPU parts, the doctor's gloo check
#       and a 1-rank CPU training through a coordinator and an agent
#
# Other ways:
#   bash scripts/check-gpu.sh            # builds first (scripts/setup.sh, cargo)
#   COHORT_PREBUILT=1 bash scripts/check-gpu.sh
#       uses target/release's binaries and target/release/cuda-tests (built
#       by `bash scripts/check-gpu.sh build`), with the python3 on PATH
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REL=target/release
BIN="$PWD/$REL"  # absolute: the agent starts ranks from its own work dir
BINARIES=(cohort-coordinator cohort-agent cohort cohort-rank)
BUNDLE_MAX_MIB=48

build() {
  # The release binaries and the CUDA test executable.
  bash scripts/setup.sh
  source scripts/env.sh
  cargo build --release --locked -p cohort-coordinator -p cohort-agent -p cohort-cli -p cohort-rank
  local exe
  exe=$(cargo test --release --locked -p cohort-rank --test cuda --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "cuda":
        print(m["executable"])')
  cp "$exe" "$BIN/cuda-tests"
  echo "check-gpu: built $BIN/{cohort-coordinator,cohort-agent,cohort,cohort-rank,cuda-tests}"
}

bundle() {
  build
  local stage out=.gpu-bundle/cohort-gpu.tar.xz
  stage=$(mktemp -d)
  mkdir -p "$stage/$REL" "$stage/scripts" "$stage/bench/rank" .gpu-bundle
  for b in "${BINARIES[@]}" cuda-tests; do
    strip -o "$stage/$REL/$b" "$BIN/$b"
  done
  cp scripts/check-gpu.sh "$stage/scripts/"
  cp bench/rank/*.py "$stage/bench/rank/"
  echo "cohort $(git rev-parse --short HEAD 2>/dev/null || echo unknown) bundled $(date -u +%FT%TZ)" > "$stage/BUNDLE"
  tar -C "$stage" -cf - . | xz -T0 -9 > "$out"
  rm -rf "$stage"
  local mib=$(( $(stat -c %s "$out") / 1048576 ))
  echo "check-gpu: wrote $out ($(du -h "$out" | cut -f1)); there: rm -rf /tmp/cohort-gpu && mkdir -p /tmp/cohort-gpu && tar -xJf $out -C /tmp/cohort-gpu && bash /tmp/cohort-gpu/scripts/check-gpu.sh"
  if (( mib >= BUNDLE_MAX_MIB )); then
    echo "check-gpu: FAILED: the bundle is ${mib} MiB, over ${BUNDLE_MAX_MIB} MiB"
    exit 1
  fi
}

case "${1:-}" in
  build) build; exit 0 ;;
  bundle) bundle; exit 0 ;;
esac
MODE="${1:-gpu}"
[[ -f BUNDLE ]] && COHORT_PREBUILT=1

LOG="${OUT:-.}/check-gpu.log"
[[ "$MODE" == cpu ]] && LOG="${OUT:-.}/check-cpu.log"
exec > >(tee "$LOG") 2>&1
echo "check-gpu: $(date -u +%FT%TZ) on $(hostname), mode $MODE${COHORT_PREBUILT:+, prebuilt}$([[ -f BUNDLE ]] && echo ", $(cat BUNDLE)")"
if [[ "${COHORT_PREBUILT:-0}" == 1 ]]; then
  PYTHON="${PYTHON:-python3}"
  TORCH_LIB="$("$PYTHON" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')"
  export LD_LIBRARY_PATH="$TORCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  build
  source scripts/env.sh
  PYTHON="$COHORT_VENV/bin/python"
fi
echo "check-gpu: torch $("$PYTHON" -c 'import torch; print(torch.__version__)') from $PYTHON"
status=0
step() { echo; echo "== $*"; }

# A coordinator and an agent on this host ($1: extra agent flags).
start_cluster() {
  WORK=$(mktemp -d)
  "$BIN/cohort-coordinator" --listen 127.0.0.1:50551 --data-dir "$WORK/coordinator" > "$WORK/coordinator.log" 2>&1 &
  COORD=$!
  # shellcheck disable=SC2086
  "$BIN/cohort-agent" --coordinator http://127.0.0.1:50551 --name check-host --address 127.0.0.1 \
    --work-dir "$WORK/agent" --rank-binary "$BIN/cohort-rank" ${1:-} > "$WORK/agent.log" 2>&1 &
  AGENT=$!
  trap 'kill $AGENT $COORD 2>/dev/null || true' EXIT
  export COHORT_COORDINATOR=http://127.0.0.1:50551
  for _ in $(seq 60); do "$BIN/cohort" gpus >/dev/null 2>&1 && break; sleep 1; done
  "$BIN/cohort" gpus
}

# Submits $1 on $2 GPUs and watches it to the end; its report after.
train() {
  local id
  id=$("$BIN/cohort" train submit --config "$1" --gpus "$2" --quiet)
  if "$BIN/cohort" train watch "$id"; then
    "$BIN/cohort" train report "$id" || true
  else
    status=1
    tail -40 "$WORK/agent.log"
  fi
}

if [[ "$MODE" == cpu ]]; then
  step "the host doctor's gloo all-reduce (no GPU here: the GPU checks fail or skip)"
  "$BIN/cohort-agent" doctor --json --rank-binary "$BIN/cohort-rank" > "${OUT:-.}/doctor-cpu.json" || true
  "$PYTHON" - "${OUT:-.}/doctor-cpu.json" <<'PY' || status=1
import json, sys
report = json.load(open(sys.argv[1]))
checks = {c["name"]: c for c in report["checks"]}
gloo = checks["all_reduce"]
print(f"all_reduce: {gloo['status']}: {gloo['value']} ({gloo['detail']})")
sys.exit(0 if gloo["status"].lower() == "pass" else 1)
PY
  step "a 1-rank CPU training through a coordinator and an agent (2 simulated GPUs)"
  start_cluster "--simulate-gpus 2:16GiB"
  cat > "$WORK/cpu.toml" <<TOML
[model]
d_in = 64
d_sae = 256
[optim]
batch_size = 256
steps = 200
[checkpoint]
every_steps = 100
[data.synthetic]
num_samples = 16384
num_features = 128
[runtime]
device = "cpu"
log_every_steps = 50
TOML
  train "$WORK/cpu.toml" 1
  echo
  if (( status == 0 )); then echo "check-gpu: the CPU parts passed"; else echo "check-gpu: FAILED (see above)"; fi
  exit "$status"
fi

if ! nvidia-smi -L; then
  echo "check-gpu: FAILED: no NVIDIA GPU here (nvidia-smi -L failed)"
  exit 1
fi
GPUS=$(nvidia-smi -L | wc -l)

step "cohort-rank's CUDA tests"
COHORT_RANK_BIN="$BIN/cohort-rank" "$BIN/cuda-tests" --ignored --test-threads 1 || status=1

step "the host doctor"
"$BIN/cohort-agent" doctor --rank-binary "$BIN/cohort-rank" || status=1
"$BIN/cohort-agent" doctor --json --rank-binary "$BIN/cohort-rank" > "${OUT:-.}/doctor.json" || true

step "SAE trainings through a coordinator and an agent"
start_cluster
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
  train "$WORK/sae.toml" "$n"
done

step "the rank benchmark against PyTorch (bf16, d_in 768 -> d_sae 24576)"
"$PYTHON" bench/rank/bench.py --device cuda --dtype bf16 --d-in 768 --d-sae 24576 --batch 4096 \
  --steps 200 --warmup 20 --samples 262144 --repeat 2 || status=1

echo
if (( status == 0 )); then echo "check-gpu: every step passed"; else echo "check-gpu: FAILED (see above)"; fi
exit "$status"
