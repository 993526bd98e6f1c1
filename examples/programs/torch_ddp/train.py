"""A plain PyTorch DDP training, as a team would write it for torchrun.

It knows nothing of cohort beyond a few environment variables, all
optional: it runs unchanged under `torchrun --nproc-per-node 2 train.py`
(and under `torchrun --nnodes 1:4`, torchrun's elastic mode).

- `init_process_group(init_method="env://")` finds its peers from RANK,
  WORLD_SIZE, MASTER_ADDR and MASTER_PORT (torchrun's, and cohort's).
- Rank 0 writes a checkpoint every `--checkpoint-every` steps as
  `$COHORT_CHECKPOINT_DIR/step-<N>/`, written into a temporary directory
  and renamed into place, so a `step-<N>` directory is always complete.
- On a restart, `$COHORT_RESUME_DIR` names the newest complete checkpoint:
  every rank loads it and goes on from its step.
- It is elastic: it may be stopped and started again at another world
  size (cohort's `[program] elastic = true`, torchrun's `--nnodes MIN:MAX`).
  It holds a global batch (`$COHORT_GLOBAL_BATCH` or `--global-batch`;
  default `--batch` per rank) at every size: step s reads the same samples
  whatever the size, each rank its share, so the optimisation does not
  depend on how many ranks run it.
- On SIGTERM (cohort's preemption or resize notice, torchrun's stop) every
  rank finishes its step, they agree to stop, rank 0 checkpoints that step
  and they exit 0: the next start resumes from it, at whatever size.
- Rank 0 prints one JSON line per logged step
  (`{"event": "progress", "step": ..., "total_steps": ..., "loss": ...}`);
  cohort shows them as the training's progress. Everything else it prints
  is a log line (`cohort logs`).

The model learns a fixed random linear map with noise; step s's global
batch is drawn from seed s, each rank takes its slice, DDP averages the
gradients (the mean over the global batch, at any size).
"""

import argparse
import json
import math
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

D_IN, D_OUT = 32, 8


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=64,
                   help="rows per rank when no global batch is given")
    p.add_argument("--global-batch", type=int,
                   default=int(os.environ.get("COHORT_GLOBAL_BATCH", "0")),
                   help="rows per step over all ranks, held at every size "
                        "(default: $COHORT_GLOBAL_BATCH, else --batch x ranks)")
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


def save_checkpoint(directory, step, model, optimizer, loss):
    """Write step-<N>/ atomically: a hidden temporary directory, then rename.
    It keeps the loss last reported, so that a run resumed at its last step
    (its ranks stopped after writing it) ends with the loss it reached."""
    final = os.path.join(directory, f"step-{step:08d}")
    tmp = os.path.join(directory, f".step-{step:08d}.tmp")
    os.makedirs(tmp, exist_ok=True)
    path = os.path.join(tmp, "state.pt")
    torch.save({"step": step, "model": model.state_dict(),
                "optimizer": optimizer.state_dict(), "loss": loss}, path)
    with open(path, "rb") as f:
        os.fsync(f.fileno())
    os.rename(tmp, final)
    print(f"checkpoint written: {final}", flush=True)


_stop = False


def _on_sigterm(signum, frame):
    global _stop
    _stop = True


def agree_to_stop(device):
    """Whether any rank got SIGTERM: every rank stops after the same step."""
    flag = torch.tensor([1 if _stop else 0], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def global_batch(step, size, device):
    """Step `step`'s `size` rows, the same at every world size."""
    g = torch.Generator().manual_seed(1_000_003 * step)
    x = torch.randn(size, D_IN, generator=g)
    noise = 0.01 * torch.randn(size, D_OUT, generator=g)
    return x.to(device), noise.to(device)


def main():
    args = parse_args()
    signal.signal(signal.SIGTERM, _on_sigterm)
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
    reported = float("nan")
    resume = os.environ.get("COHORT_RESUME_DIR")
    if resume:
        state = torch.load(os.path.join(resume, "state.pt"), map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
        reported = state.get("loss", reported)
        print(f"rank {rank}: resuming from {resume} at step {start}", flush=True)
    ddp = DDP(model)
    total = args.global_batch or args.batch * world
    if total % world:
        sys.exit(f"the global batch {total} does not split over {world} ranks")
    share = total // world
    sizes = (os.environ.get("COHORT_MIN_WORLD_SIZE", world),
             os.environ.get("COHORT_MAX_WORLD_SIZE", world))
    checkpoints = os.environ.get("COHORT_CHECKPOINT_DIR")
    fail_code, fail_step = (int(x) for x in args.exit_code_at.split("@")) \
        if args.exit_code_at else (0, -1)
    print(f"rank {rank} of {world} on {device} ({backend}), steps {start}..{args.steps}, "
          f"global batch {total} ({share} per rank), sizes {sizes[0]}..{sizes[1]}",
          flush=True)
    if rank == 0 and start > 0:
        emit("progress", step=start, total_steps=args.steps, resumed_from=start)

    began = time.time()
    for step in range(start + 1, args.steps + 1):
        xs, noise = global_batch(step, total, device)
        mine = slice(rank * share, (rank + 1) * share)
        x = xs[mine]
        y = x @ target.to(device) + noise[mine]
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        optimizer.zero_grad()
        loss.backward()  # DDP all-reduces the gradients here
        optimizer.step()
        if args.step_sleep:
            time.sleep(args.step_sleep)
        if rank == 0 and step == fail_step:
            print(f"exiting with code {fail_code} at step {step} as asked", file=sys.stderr, flush=True)
            sys.exit(fail_code)
        if step % args.log_every == 0 or step == args.steps:
            # The loss over the global batch: the same at any size.
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            reported = mean.item() / world
            if rank == 0:
                emit("progress", step=step, total_steps=args.steps,
                     loss=reported, lr=optimizer.param_groups[0]["lr"],
                     samples_per_sec=(step - start) * total / max(time.time() - began, 1e-9))
        if rank == 0 and checkpoints and (step % args.checkpoint_every == 0 or step == args.steps):
            save_checkpoint(checkpoints, step, model, optimizer, reported)
        # Rank 0's checkpoint is on disk before any rank goes past it.
        if step % args.checkpoint_every == 0:
            dist.barrier()
        if step < args.steps and agree_to_stop(device):
            if rank == 0 and checkpoints and step % args.checkpoint_every:
                save_checkpoint(checkpoints, step, model, optimizer, reported)
            dist.barrier()
            print(f"rank {rank}: stopped at step {step} as asked", flush=True)
            dist.destroy_process_group()
            return

    final = reported
    if rank == 0:
        emit("finished", step=args.steps, total_steps=args.steps, loss=final)
    # Every rank past its last collective and rank 0's last checkpoint
    # before any tears its connections down.
    dist.barrier()
    dist.destroy_process_group()
    if not math.isfinite(final):
        print(f"rank {rank}: the loss is {final}", file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
