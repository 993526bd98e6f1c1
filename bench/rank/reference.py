"""The reference: the same SAE, data, optimizer and schedule in PyTorch.

Run as one process (eager) or as WORLD_SIZE processes with torch DDP (gloo
on the CPU, NCCL with `--device cuda`; env RANK/WORLD_SIZE/MASTER_ADDR/
MASTER_PORT; on CUDA each process uses cuda:0 of its CUDA_VISIBLE_DEVICES).
`--dtype bf16` computes under autocast with f32 weights and Adam state, as
cohort-rank's `model.dtype = "bf16"` does. Prints one JSON line from rank 0:
samples/s over the timed steps (after the warm-up steps).
"""
import argparse
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data.distributed import DistributedSampler


class Sae(nn.Module):
    def __init__(self, d_in, d_sae):
        super().__init__()
        self.enc = nn.Linear(d_in, d_sae)
        self.dec = nn.Linear(d_sae, d_in)

    def forward(self, x, l1):
        z = torch.relu(self.enc(x))
        x_hat = self.dec(z)
        return (x_hat - x).pow(2).mean() + l1 * z.abs().mean()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--d-sae", type=int, required=True)
    p.add_argument("--batch", type=int, required=True, help="per rank")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--l1", type=float, default=1e-3)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    a = p.parse_args()
    cuda = a.device == "cuda"
    device = torch.device("cuda:0" if cuda else "cpu")

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    torch.manual_seed(0)
    data = torch.from_numpy(np.load(a.data)).float().to(device)
    model = Sae(data.shape[1], a.d_sae).to(device)
    if world > 1:
        dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
        model = nn.parallel.DistributedDataParallel(model, device_ids=[0] if cuda else None)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.dtype == "bf16")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    sampler = DistributedSampler(range(len(data)), num_replicas=world, rank=rank, seed=0)
    per_epoch = (len(sampler) + a.batch - 1) // a.batch

    step, epoch, t0 = 0, 0, None
    while step < a.steps:
        sampler.set_epoch(epoch)
        idx = torch.tensor(list(iter(sampler)), device=device)
        for b in range(per_epoch):
            if step == a.warmup:
                if world > 1:
                    dist.barrier()
                sync()
                t0 = time.perf_counter()
            x = data[idx[b * a.batch:(b + 1) * a.batch]]
            with autocast:
                loss = model(x, a.l1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if step == a.steps:
                break
        epoch += 1
    if world > 1:
        dist.barrier()
    sync()
    elapsed = time.perf_counter() - t0
    if rank == 0:
        timed = a.steps - a.warmup
        print(json.dumps({"samples_per_sec": timed * a.batch * world / elapsed,
                          "step_ms": elapsed * 1e3 / timed, "loss": loss.item()}))
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
