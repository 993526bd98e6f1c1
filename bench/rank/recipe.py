"""The SAE training step with the full recipe, cohort-rank against PyTorch eager.

    python bench/rank/recipe.py [--d-in 768 --d-sae 24576 --batch 256 --steps 30]

A typical SAE (768 -> 24576, ReLU with L1) trained with the same recipe on
both sides: Adam, linear warmup then cosine decay, gradient clipping by
global norm (1.0), a unit-norm decoder (the gradient component parallel to
each column removed before the update, columns renormalised after it), in f32
and in bf16 compute over f32 master weights (PyTorch: torch.autocast on the
CPU). One process each, the same .npy data, the same torch threads (all
cores). cohort-rank also does what it always does: the non-finite guard
(one device sync a step), dead-latent tracking, metrics on logged steps.

Step times are the mean of cohort-rank's progress windows (`step_time_ms`,
every `--log-every` steps) after `--warmup` steps, and PyTorch's median step
time after the same warm-up; each configuration runs `--repeat` times,
interleaved, and the best run counts (the machine is shared).
"""
import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RANK_BIN = os.path.join(ROOT, "target", "release", "cohort-rank")

LR, L1, WARMUP, MIN_RATIO, MAX_NORM = 4e-4, 1.0, 10, 0.1, 1.0


def cohort(args, data, dtype):
    run_dir = tempfile.mkdtemp(prefix="cohort-recipe-")
    config = os.path.join(run_dir, "sae.toml")
    with open(config, "w") as f:
        f.write(f"""[model]
d_in = {args.d_in}
d_sae = {args.d_sae}
l1_coefficient = {L1}
dtype = "{dtype}"
decoder_norm = "unit"
[optim]
learning_rate = {LR}
lr_schedule = "cosine"
lr_warmup_steps = {WARMUP}
lr_min_ratio = {MIN_RATIO}
max_grad_norm = {MAX_NORM}
batch_size = {args.batch}
steps = {args.steps}
[checkpoint]
every_steps = 0
[data.files]
paths = ["{data}"]
[runtime]
device = "cpu"
log_every_steps = {args.log_every}
""")
    env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
               MASTER_ADDR="127.0.0.1", MASTER_PORT="29555")
    out = subprocess.run([RANK_BIN, "--config", config, "--run-dir", os.path.join(run_dir, "run")],
                         env=env, capture_output=True, text=True)
    shutil.rmtree(run_dir, ignore_errors=True)  # the final checkpoint: ~430 MB
    if out.returncode != 0:
        sys.exit(f"cohort-rank failed ({out.returncode}): {out.stderr[-2000:]}")
    windows = []
    loss = None
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            ev = json.loads(line)
            if ev.get("event") == "progress":
                loss = ev["loss"]
                if ev["step"] > args.warmup:
                    windows.append(ev["step_time_ms"])
    return sum(windows) / len(windows), loss


class Sae(torch.nn.Module):
    def __init__(self, d_in, d_sae):
        super().__init__()
        w_dec = torch.empty(d_in, d_sae).uniform_(-1 / math.sqrt(d_sae), 1 / math.sqrt(d_sae))
        w_dec /= w_dec.norm(dim=0, keepdim=True)
        self.w_enc = torch.nn.Parameter(w_dec.t().contiguous())
        self.b_enc = torch.nn.Parameter(torch.zeros(d_sae))
        self.w_dec = torch.nn.Parameter(w_dec)
        self.b_dec = torch.nn.Parameter(torch.zeros(d_in))

    def forward(self, x):
        z = torch.relu(torch.nn.functional.linear(x, self.w_enc, self.b_enc))
        x_hat = torch.nn.functional.linear(z, self.w_dec, self.b_dec)
        mse = (x_hat.float() - x.float()).pow(2).mean()
        return mse + L1 * z.float().abs().mean()


def reference(args, data, dtype, fused):
    torch.manual_seed(0)
    x_all = torch.from_numpy(np.load(data))
    model = Sae(args.d_in, args.d_sae)
    # PyTorch's default Adam on CPU is the foreach one; fused=True is the
    # single-pass kernel cohort-rank uses.
    opt = torch.optim.Adam(model.parameters(), lr=LR, fused=fused)

    def factor(step):
        if step < WARMUP:
            return (step + 1) / WARMUP
        p = min(1.0, (step - WARMUP) / max(1, args.steps - 1 - WARMUP))
        return MIN_RATIO + (1 - MIN_RATIO) * 0.5 * (1 + math.cos(math.pi * p))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    times = []
    for step in range(args.steps):
        t0 = time.perf_counter()
        x = x_all[step * args.batch:(step + 1) * args.batch]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss = model(x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        with torch.no_grad():
            w, g = model.w_dec, model.w_dec.grad
            g -= w * (g * w).sum(dim=0, keepdim=True)
        torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        opt.step()
        sched.step()
        with torch.no_grad():
            model.w_dec /= model.w_dec.norm(dim=0, keepdim=True)
        loss_value = loss.item()
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times[args.warmup:])), loss_value


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--d-in", type=int, default=768)
    p.add_argument("--d-sae", type=int, default=24576)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--dtypes", default="f32,bf16")
    a = p.parse_args()
    if not os.path.exists(RANK_BIN):
        sys.exit(f"build it first: cargo build --release -p cohort-rank ({RANK_BIN})")
    torch.set_num_threads(os.cpu_count() or 1)
    data_dir = tempfile.mkdtemp(prefix="cohort-recipe-data-")
    data = os.path.join(data_dir, "acts.npy")
    rng = np.random.default_rng(0)
    np.save(data, rng.standard_normal((a.batch * a.steps, a.d_in)).astype(np.float32))
    print(f"# {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}; SAE {a.d_in} -> {a.d_sae}, "
          f"batch {a.batch}, {a.steps} steps ({a.warmup} warm-up), best of {a.repeat}")
    print("| dtype | cohort-rank ms/step | PyTorch eager ms/step (default Adam) | PyTorch eager, Adam fused=True | "
          "cohort / PyTorch default | cohort / PyTorch fused | cohort samples/s | final loss (cohort, PyTorch) |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for dtype in a.dtypes.split(","):
        ours, theirs, fused = [], [], []
        for _ in range(a.repeat):
            ours.append(cohort(a, data, dtype))
            theirs.append(reference(a, data, dtype, fused=False))
            fused.append(reference(a, data, dtype, fused=True))
        (ms, loss), (ref_ms, ref_loss), (fused_ms, _) = min(ours), min(theirs), min(fused)
        print(f"| {dtype} | {ms:.1f} | {ref_ms:.1f} | {fused_ms:.1f} | {ms / ref_ms:.2f} | {ms / fused_ms:.2f} | "
              f"{a.batch / ms * 1e3:,.0f} | {loss:.4f}, {ref_loss:.4f} |")


if __name__ == "__main__":
    main()
