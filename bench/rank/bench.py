"""cohort-rank against PyTorch: same SAE, same .npy data, same steps.

    python bench/rank/bench.py [--d-in 256 --d-sae 2048 --batch 512 --steps 200]
    python bench/rank/bench.py --device cuda --dtype bf16 --d-in 768 --d-sae 24576 --batch 4096

On a GPU (`--device cuda`) it runs cohort-rank and eager PyTorch on one GPU,
and at 2 GPUs (NCCL; DDP for PyTorch) when the host has two, and prints the
achieved TFLOP/s (12 x d_in x d_sae flops a sample: the encoder's and the
decoder's matmuls, forward and backward) and its fraction of the GPU's
dense bf16 peak (`--peak-tflops`, else by model name).

Runs, in turn: cohort-rank at 1 rank, eager PyTorch; cohort-rank at 2 ranks
(gloo) with its default of one flat all-reduce after the backward pass, with
overlapped buckets, and with one all-reduce per parameter; and torch DDP on
gloo at 2 ranks. Prints samples/s for each and the ratios.
Throughput is measured after `--warmup` steps in every case.
"""
import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RANK_BIN = os.path.join(ROOT, "target", "release", "cohort-rank")
REFERENCE = os.path.join(os.path.dirname(__file__), "reference.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(cmd, world, extra_env=None, gpus=False):
    port = str(free_port())
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                   **(extra_env or {}))
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = str(rank)
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True))
    outs = [p.communicate()[0] for p in procs]
    for p in procs:
        if p.returncode != 0:
            sys.exit(f"bench: {cmd[0]} failed with exit code {p.returncode}")
    return outs[0]


def cohort(args, data, world, mode):
    run_dir = tempfile.mkdtemp(prefix="cohort-bench-")
    config = os.path.join(run_dir, "sae.toml")
    with open(config, "w") as f:
        f.write(f"""[model]
d_in = {args.d_in}
d_sae = {args.d_sae}
l1_coefficient = 0.001
# the reference's plain recipe: nn.Linear's init, no decoder constraint
decoder_norm = "none"
[optim]
learning_rate = 0.001
batch_size = {args.batch}
steps = {args.steps}
[checkpoint]
every_steps = 0
[data.files]
paths = ["{data}"]
[runtime]
log_every_steps = {args.warmup}
allreduce = "{mode}"
device = "{args.device}"
""".replace("decoder_norm = \"none\"", f"decoder_norm = \"none\"\ndtype = \"{args.dtype}\""))
    out = launch([RANK_BIN, "--config", config, "--run-dir", run_dir], world, gpus=args.device == "cuda")
    shutil.rmtree(run_dir, ignore_errors=True)
    windows = [json.loads(l) for l in out.splitlines() if l.startswith('{"event":"progress"')]
    # windows after the warm-up: each covers `warmup` steps
    timed = [w for w in windows if w["step"] > args.warmup]
    secs = sum(w["step_time_ms"] * args.warmup for w in timed) / 1e3
    samples = len(timed) * args.warmup * args.batch * world
    return {"samples_per_sec": samples / secs, "step_ms": secs * 1e3 / (len(timed) * args.warmup),
            "loss": windows[-1]["loss"]}


def reference(args, data, world):
    cmd = [sys.executable, REFERENCE, "--data", data, "--d-sae", str(args.d_sae),
           "--batch", str(args.batch), "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--device", args.device, "--dtype", args.dtype]
    return json.loads(launch(cmd, world, gpus=args.device == "cuda").strip().splitlines()[-1])


# Dense bf16 peaks (TFLOP/s) by a fragment of the model name, most specific first.
PEAKS = [("GH200", 989), ("H200", 989), ("H100 PCIe", 756), ("H100 NVL", 835), ("H100", 989),
         ("B200", 2250), ("A100", 312), ("L40S", 362), ("L40", 181), ("L4", 121), ("A10G", 70),
         ("A10", 125), ("RTX 4090", 165)]


def gpu_bench(args, data):
    """The GPU runs: TFLOP/s and the fraction of peak beside samples/s."""
    import torch
    name = torch.cuda.get_device_name(0)
    count = torch.cuda.device_count()
    peak = args.peak_tflops or next((p for f, p in PEAKS if f.lower() in name.lower()), None)
    flops = 12.0 * args.d_in * args.d_sae
    print(f"GPU: {name} x{count}; torch {torch.__version__}; SAE d_in={args.d_in} d_sae={args.d_sae}, "
          f"{args.dtype}, per-rank batch {args.batch}, {args.steps} steps ({args.warmup} warm-up)")
    runs = [("cohort-rank, 1 GPU", lambda: cohort(args, data, 1, "flat")),
            ("PyTorch eager, 1 GPU", lambda: reference(args, data, 1))]
    if count >= 2:
        runs += [("cohort-rank, 2 GPUs (NCCL, flat)", lambda: cohort(args, data, 2, "flat")),
                 ("cohort-rank, 2 GPUs (NCCL, overlap)", lambda: cohort(args, data, 2, "overlap")),
                 ("PyTorch DDP NCCL, 2 GPUs", lambda: reference(args, data, 2))]
    else:
        print("SKIPPED: the 2-GPU runs (this host has one GPU)")
    print(f"{'run':<40}{'samples/s':>12}{'ms/step':>10}{'TFLOP/s':>10}{'of peak':>9}")
    for name_, run in runs:
        r = max((run() for _ in range(args.repeat)), key=lambda r: r["samples_per_sec"])
        tflops = r["samples_per_sec"] * flops / 1e12
        share = f"{100 * tflops / (peak * (2 if '2 GPUs' in name_ else 1)):.0f} %" if peak else "?"
        print(f"{name_:<40}{r['samples_per_sec']:>12.0f}{r['step_ms']:>10.2f}{tflops:>10.1f}{share:>9}")
    print(f"peak: {peak if peak else 'unknown'} TFLOP/s dense bf16 per GPU")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--d-in", type=int, default=256)
    p.add_argument("--d-sae", type=int, default=2048)
    p.add_argument("--batch", type=int, default=512, help="per rank")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--samples", type=int, default=65536)
    p.add_argument("--repeat", type=int, default=3,
                   help="runs of each configuration, interleaved; the best is reported")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="the GPU's dense peak for --dtype (default: by model name)")
    args = p.parse_args()
    if not os.path.exists(RANK_BIN):
        sys.exit("bench: build first: cargo build --release -p cohort-rank")

    tmp = tempfile.mkdtemp(prefix="cohort-bench-data-")
    data = os.path.join(tmp, "acts.npy")
    rng = np.random.default_rng(0)
    np.save(data, rng.standard_normal((args.samples, args.d_in), dtype=np.float32))

    if args.device == "cuda":
        gpu_bench(args, data)
        shutil.rmtree(tmp, ignore_errors=True)
        return
    import torch
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"torch {torch.__version__}; SAE d_in={args.d_in} d_sae={args.d_sae}, "
          f"per-rank batch {args.batch}, {args.steps} steps ({args.warmup} warm-up), CPU")
    runs = [
        ("cohort-rank, 1 rank", lambda: cohort(args, data, 1, "flat")),
        ("PyTorch eager, 1 process", lambda: reference(args, data, 1)),
        ("cohort-rank, 2 ranks (overlapped buckets)", lambda: cohort(args, data, 2, "overlap")),
        ("cohort-rank, 2 ranks (flat all-reduce)", lambda: cohort(args, data, 2, "flat")),
        ("cohort-rank, 2 ranks (per-param all-reduce)", lambda: cohort(args, data, 2, "per_param")),
        ("PyTorch DDP gloo, 2 ranks", lambda: reference(args, data, 2)),
    ]
    best = {}
    for _ in range(args.repeat):
        for name, run in runs:
            r = run()
            if name not in best or r["samples_per_sec"] > best[name]["samples_per_sec"]:
                best[name] = r
    rows = [(name, best[name]) for name, _ in runs]
    print(f"best of {args.repeat} interleaved runs each")
    print(f"{'run':<46}{'samples/s':>12}{'ms/step':>10}{'final loss':>12}")
    for name, r in rows:
        print(f"{name:<46}{r['samples_per_sec']:>12.0f}{r['step_ms']:>10.2f}{r['loss']:>12.5f}")
    shutil.rmtree(tmp, ignore_errors=True)
    sps = {name: r["samples_per_sec"] for name, r in rows}
    one = sps["cohort-rank, 1 rank"] / sps["PyTorch eager, 1 process"]
    two = sps["cohort-rank, 2 ranks (flat all-reduce)"] / sps["PyTorch DDP gloo, 2 ranks"]
    overlap = sps["cohort-rank, 2 ranks (overlapped buckets)"] / sps["PyTorch DDP gloo, 2 ranks"]
    flat = sps["cohort-rank, 2 ranks (flat all-reduce)"] / sps["cohort-rank, 2 ranks (per-param all-reduce)"]
    print(f"ratio cohort/PyTorch: 1 rank {one:.2f}x, 2 ranks {two:.2f}x "
          f"(default flat all-reduce; overlapped buckets {overlap:.2f}x); "
          f"flat vs per-param all-reduce: {flat:.2f}x")


if __name__ == "__main__":
    main()
