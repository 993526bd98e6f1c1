#!/usr/bin/env bash
# The first command: set up, build, start a coordinator (embedded SQLite under
# .cohort/) and a local agent (NVML GPUs when the driver is there, else two
# simulated GPUs), submit the demo SAE job and watch it train.
#   ./scripts/demo.sh            keeps the coordinator and agent running afterwards (Ctrl-C stops them)
#   ./scripts/demo.sh --once     stops everything when the demo job ends
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ONCE=0; [ "${1:-}" = "--once" ] && ONCE=1
STATE="$PWD/.cohort"
mkdir -p "$STATE/logs"
bash scripts/setup.sh system console
source scripts/env.sh
# Only cohort-rank links libtorch: PyTorch downloads (minutes, once) while
# the coordinator, the agent and the CLI build (with cohort-rank's features
# on the crates they share: build-unify/, so nothing builds twice).
bash scripts/setup.sh torch > "$STATE/logs/setup-torch.log" 2>&1 &
torch_setup=$!
echo "demo: PyTorch installs in the background (log: $STATE/logs/setup-torch.log)"
echo "demo: building the coordinator, the agent and the CLI while PyTorch installs (the first build takes minutes)"
cargo build --profile demo --locked -p cohort-coordinator -p cohort-agent -p cohort-cli
if ! wait "$torch_setup"; then
  cat "$STATE/logs/setup-torch.log" >&2
  echo "demo: installing PyTorch failed (above)" >&2
  exit 1
fi
echo "demo: building cohort-rank against PyTorch's libtorch"
cargo build --profile demo --locked -p cohort-coordinator -p cohort-agent -p cohort-cli -p cohort-rank
BIN="$PWD/target/demo"
PORT="${COHORT_DEMO_PORT:-50051}"
URL="http://127.0.0.1:$PORT"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

"$BIN/cohort-coordinator" --listen "127.0.0.1:$PORT" --data-dir "$STATE/coordinator" > "$STATE/logs/coordinator.log" 2>&1 &
pids+=($!)
gpus=()
if ! "$BIN/cohort-agent" --probe-once >/dev/null 2>&1; then
  echo "demo: no NVIDIA driver here: the agent simulates 2 GPUs (marked simulated everywhere)"
  gpus=(--simulate-gpus 2:16GiB)
fi
"$BIN/cohort-agent" --coordinator "$URL" --name "$(hostname)" --address 127.0.0.1 \
  --work-dir "$STATE/agent" --rank-binary "$BIN/cohort-rank" "${gpus[@]}" \
  --program-root "$PWD/examples/programs" > "$STATE/logs/agent.log" 2>&1 &
pids+=($!)

export COHORT_COORDINATOR="$URL"
for _ in $(seq 1 50); do "$BIN/cohort" gpus >/dev/null 2>&1 && break; sleep 0.2; done
"$BIN/cohort" agents
"$BIN/cohort" gpus
echo
echo "demo: the web console is at $URL/ — open it to watch the fleet and the trainings below"
echo
echo "demo: submitting examples/sae.toml on 2 GPUs (2 DDP ranks, gloo on CPU)"
"$BIN/cohort" train submit --config examples/sae.toml --gpus 2 --wait
echo
"$BIN/cohort" train list
echo
echo "demo: the last lines of each rank of that training (cohort logs)"
demo_id=$("$BIN/cohort" -o json train list | grep -o '"id":"trn-[0-9a-f]*"' | sed -n 1p | cut -d'"' -f4)
"$BIN/cohort" logs "$demo_id" --tail 3
echo
echo "demo: a team's own PyTorch DDP script (examples/programs/torch_ddp) as a [program] training"
cat > "$STATE/torch_ddp.toml" <<TOML
[program]
command = ["$COHORT_VENV/bin/python", "$PWD/examples/programs/torch_ddp/train.py", "--steps", "100"]
working_dir = "$PWD/examples/programs/torch_ddp"
memory_gib_per_rank = 1
[checkpoint]
keep = 2
TOML
"$BIN/cohort" train submit --config "$STATE/torch_ddp.toml" --gpus 2 --wait
program_id=$("$BIN/cohort" -o json train list | grep -o '"id":"trn-[0-9a-f]*"' | sed -n 1p | cut -d'"' -f4)
"$BIN/cohort" train get "$program_id"
"$BIN/cohort" checkpoints "$program_id"
"$BIN/cohort" train report "$program_id"
if [ "$ONCE" = 1 ]; then exit 0; fi
cat <<MSG

The coordinator ($URL) and the agent keep running; logs in $STATE/logs/.
Open the web console: $URL/ (fleet, trainings with live curves and logs, a form to submit more). Or try:
  $BIN/cohort gpus
  $BIN/cohort telemetry watch --view per-gpu
  $BIN/cohort train submit --config examples/sae.toml --gpus 1 --wait
  $BIN/cohort logs <training id> --follow
  .venv/bin/grpcurl -plaintext 127.0.0.1:$PORT list
Ctrl-C stops them.
MSG
wait
