"""The streamed data plane: per-rank memory against data-set size, and
samples/s from shards against synthetic data of the same shape.

    python bench/data/bench.py [--sizes-gib 0.5 2 8] [--d-in 768] [--d-sae 1536]
                               [--batch 1024] [--steps 60] [--dir DIR] [--s3]

For each size it writes f16 .npy shards of 1 GiB at most (numpy, through a
memory map, so this script never holds a shard either), then runs 2
cohort-rank processes (gloo, CPU) on them and, once, on synthetic data of the
same shape. It samples every rank's RssAnon (anonymous resident memory,
/proc/PID/status) every 20 ms and prints, per run: the peak per rank,
samples/s (from the finished line) and the mean data wait per step (from the
rank_stats lines). With --s3 it also uploads the smallest size's shards to
moto's S3 server on 127.0.0.1 (the project venv's moto_server) and runs the
same job reading them from s3://. Needs target/release/cohort-rank
(cargo build --release).
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
import threading
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RANK_BIN = os.path.join(ROOT, "target", "release", "cohort-rank")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_anon(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def write_shards(out, gib, d_in, shard_mib):
    """f16 shards holding `gib` GiB in all, written chunk by chunk."""
    os.makedirs(out, exist_ok=True)
    rows_total = int(gib * (1 << 30)) // (d_in * 2)
    rows_per_shard = (shard_mib << 20) // (d_in * 2)
    rng = np.random.default_rng(0)
    done, i = 0, 0
    while done < rows_total:
        rows = min(rows_per_shard, rows_total - done)
        arr = np.lib.format.open_memmap(f"{out}/shard-{i:04d}.npy", mode="w+",
                                        dtype=np.float16, shape=(rows, d_in))
        for s in range(0, rows, 65536):
            e = min(rows, s + 65536)
            arr[s:e] = rng.standard_normal((e - s, d_in), dtype=np.float32).astype(np.float16)
        arr.flush()
        del arr
        done += rows
        i += 1
    return rows_total


def config(args, data, run_dir):
    path = os.path.join(run_dir, "sae.toml")
    with open(path, "w") as f:
        f.write(f"""[model]
d_in = {args.d_in}
d_sae = {args.d_sae}
[optim]
batch_size = {args.batch}
steps = {args.steps}
[checkpoint]
every_steps = 0
[runtime]
device = "cpu"
log_every_steps = 10
{data}
""")
    return path


def start_s3():
    """moto_server on a free port; returns (process, the AWS_* environment)."""
    port = free_port()
    server = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "moto_server"),
                               "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            break
        except OSError:
            time.sleep(0.1)
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "bench",
           "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
    return server, env


def upload(env, src, bucket, prefix):
    import boto3
    s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id="bench",
                      aws_secret_access_key="bench", region_name="us-east-1")
    s3.create_bucket(Bucket=bucket)
    for name in sorted(os.listdir(src)):
        s3.upload_file(os.path.join(src, name), bucket, f"{prefix}/{name}")


def run(args, data, world=2, extra_env=None):
    run_dir = tempfile.mkdtemp(prefix="cohort-data-bench-")
    cfg = config(args, data, run_dir)
    port = str(free_port())
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                   **(extra_env or {}))
        procs.append(subprocess.Popen([RANK_BIN, "--config", cfg, "--run-dir", run_dir],
                                      env=env, stdout=subprocess.PIPE, text=True))
    peaks = [0] * world
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            for i, p in enumerate(procs):
                peaks[i] = max(peaks[i], rss_anon(p.pid))
            time.sleep(0.02)

    t = threading.Thread(target=sample)
    t.start()
    outs = [p.communicate()[0] for p in procs]
    stop.set()
    t.join()
    shutil.rmtree(run_dir, ignore_errors=True)
    for p in procs:
        if p.returncode != 0:
            sys.exit(f"bench: cohort-rank failed with exit code {p.returncode}")
    lines = [json.loads(l) for out in outs for l in out.splitlines() if l.startswith("{")]
    finished = next(l for l in lines if l["event"] == "finished")
    waits = [l["data_wait_ms"] for l in lines if l["event"] == "rank_stats"]
    steps = [l["step_time_ms"] for l in lines if l["event"] == "rank_stats"]
    return {
        "peak_rss_anon_mib": [round(p / (1 << 20), 1) for p in peaks],
        "samples_per_sec": round(finished["mean_samples_per_sec"], 1),
        "data_wait_ms": round(sum(waits) / len(waits), 3),
        "step_ms": round(sum(steps) / len(steps), 2),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes-gib", type=float, nargs="+", default=[0.5, 2.0, 8.0])
    ap.add_argument("--d-in", type=int, default=768)
    ap.add_argument("--d-sae", type=int, default=1536)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--dir", default=None, help="where shards are written (default: a temp dir)")
    ap.add_argument("--s3", action="store_true", help="also read the smallest size from S3 (moto)")
    ap.add_argument("--shard-mib", type=int, default=1024,
                    help="shard size (moto serves a ranged GET in time proportional to the whole "
                         "object, so compare S3 with shards of tens of MiB)")
    args = ap.parse_args()
    if not os.path.exists(RANK_BIN):
        sys.exit("bench: build first: cargo build --release -p cohort-rank")
    base = args.dir or tempfile.mkdtemp(prefix="cohort-shards-")
    print(f"machine: {platform.node()} {os.cpu_count()} cores, {platform.machine()}")
    print(f"SAE d_in {args.d_in} d_sae {args.d_sae}, batch {args.batch}/rank, 2 ranks (gloo, CPU), {args.steps} steps")
    results = []
    for gib in args.sizes_gib:
        out = os.path.join(base, f"{gib}g")
        t0 = time.time()
        rows = write_shards(out, gib, args.d_in, args.shard_mib)
        print(f"wrote {gib} GiB ({rows} rows, f16, shards of {args.shard_mib} MiB) in {time.time() - t0:.0f} s")
        r = run(args, f'[data.files]\npaths = ["{out}"]')
        r.update(source=f"files {gib} GiB f16", rows=rows)
        print(json.dumps(r))
        results.append(r)
        if args.s3 and gib == min(args.sizes_gib):
            server, env = start_s3()
            try:
                t0 = time.time()
                upload(env, out, "bench", "acts")
                print(f"uploaded {gib} GiB to moto in {time.time() - t0:.0f} s")
                r = run(args, '[data.files]\npaths = ["s3://bench/acts/"]', extra_env=env)
                r.update(source=f"S3 (moto) {gib} GiB f16", rows=rows)
                print(json.dumps(r))
                results.append(r)
            finally:
                server.kill()
        shutil.rmtree(out, ignore_errors=True)
        last_rows = rows
    r = run(args, f"[data.synthetic]\nnum_samples = {last_rows}")
    r.update(source="synthetic", rows=last_rows)
    print(json.dumps(r))
    results.append(r)
    print()
    print("| source | rows | peak RssAnon per rank (MiB) | samples/s | data wait ms/step | step ms |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['source']} | {r['rows']:,} | {' / '.join(map(str, r['peak_rss_anon_mib']))} "
              f"| {r['samples_per_sec']:,.0f} | {r['data_wait_ms']} | {r['step_ms']} |")


if __name__ == "__main__":
    main()
