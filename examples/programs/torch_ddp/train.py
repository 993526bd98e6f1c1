"""A plain PyTorch DDP training, as a team would write it for torchrun.

It knows nothing of cohort beyond three environment variables, all
optional: it runs unchanged under `torchrun --nproc-per-node 2 train.py`.

- `init_process_group(init_method="env://")` finds its peers from RANK,
  WORLD_SIZE, MASTER_ADDR and MASTER_PORT (torchrun's, and cohort's).
- Rank 0 writes a checkpoint every `--checkpoint-every` steps as
  `$COHORT_CHECKPOINT_DIR/step-<N>/`, written into a temporary directory
  and renamed into place, so a `step-<N>` directory is always complete.
- On a restart, `$COHORT_RESUME_DIR` names the newest complete checkpoint:
  every rank loads it and goes on from its step.
- Rank 0 prints one JSON line per logged step
  (`{"event": "progress", "step": ..., "total_steps": ..., "loss": ...}`);
  cohort shows them as the training's progress. Everything else it prints
  is a log line (`cohort logs`).

The model learns a fixed random linear map with noise; every rank draws
its own batches (its own seed), DDP averages the gradients.
"""

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

D_IN, D_OUT = 32, 8


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--checkpoint-every", type=int, default=20)
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--step-sleep", type=float, default=0.0,
                   help="seconds to sleep per step (to watch it, or to test restarts)")
    p.add_argument("--exit-code-at", type=str, default="",
                   help="CODE@STEP: rank 0 exits with CODE at STEP (for tests)")
    return p.parse_args()


def emit(event, **fields):
    """One protocol line on stdout (rank 0 only)."""
    print(json.dumps({"event": event, **fields}), flush=True)


def save_checkpoint(directory, step, model, optimizer):
    """Write step-<N>/ atomically: a hidden temporary directory, then rename."""
    final = os.path.join(directory, f"step-{step:08d}")
    tmp = os.path.join(directory, f".step-{step:08d}.tmp")
    os.makedirs(tmp, exist_ok=True)
    path = os.path.join(tmp, "state.pt")
    torch.save({"step": step, "model": model.state_dict(),
                "optimizer": optimizer.state_dict()}, path)
    with open(path, "rb") as f:
        os.fsync(f.fileno())
    os.rename(tmp, final)
    print(f"checkpoint written: {final}", flush=True)


def main():
    args = parse_args()
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend=backend, init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    # cohort gives each rank one GPU (CUDA_VISIBLE_DEVICES): it is cuda:0;
    # under torchrun every rank sees them all and takes LOCAL_RANK's.
    local = int(os.environ.get("LOCAL_RANK", 0)) if torch.cuda.device_count() > 1 else 0
    device = torch.device("cuda", local) if backend == "nccl" else torch.device("cpu")
    torch.manual_seed(0)  # the same initial model on every rank
    target = torch.randn(D_IN, D_OUT)
    model = torch.nn.Linear(D_IN, D_OUT).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)

    start = 0
    resume = os.environ.get("COHORT_RESUME_DIR")
    if resume:
        state = torch.load(os.path.join(resume, "state.pt"), map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
        print(f"rank {rank}: resuming from {resume} at step {start}", flush=True)
    ddp = DDP(model)
    generator = torch.Generator().manual_seed(1000 + rank)  # each rank its own data
    checkpoints = os.environ.get("COHORT_CHECKPOINT_DIR")
    fail_code, fail_step = (int(x) for x in args.exit_code_at.split("@")) \
        if args.exit_code_at else (0, -1)
    print(f"rank {rank} of {world} on {device} ({backend}), steps {start}..{args.steps}",
          flush=True)
    if rank == 0 and start > 0:
        emit("progress", step=start, total_steps=args.steps, resumed_from=start)

    loss = torch.tensor(float("nan"))
    began = time.time()
    for step in range(start + 1, args.steps + 1):
        x = torch.randn(args.batch, D_IN, generator=generator).to(device)
        y = x @ target.to(device) + 0.01 * torch.randn(args.batch, D_OUT, generator=generator).to(device)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        optimizer.zero_grad()
        loss.backward()  # DDP all-reduces the gradients here
        optimizer.step()
        if args.step_sleep:
            time.sleep(args.step_sleep)
        if rank == 0 and step == fail_step:
            print(f"exiting with code {fail_code} at step {step} as asked", file=sys.stderr, flush=True)
            sys.exit(fail_code)
        if rank == 0 and (step % args.log_every == 0 or step == args.steps):
            emit("progress", step=step, total_steps=args.steps, loss=loss.item(),
                 lr=optimizer.param_groups[0]["lr"],
                 samples_per_sec=step * args.batch * world / max(time.time() - began, 1e-9))
        if rank == 0 and checkpoints and (step % args.checkpoint_every == 0 or step == args.steps):
            save_checkpoint(checkpoints, step, model, optimizer)
        # Rank 0's checkpoint is on disk before any rank goes past it.
        if step % args.checkpoint_every == 0:
            dist.barrier()

    final = loss.item()
    if rank == 0:
        emit("finished", step=args.steps, total_steps=args.steps, loss=final)
    dist.destroy_process_group()
    if not math.isfinite(final):
        print(f"rank {rank}: the loss is {final}", file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
