#!/usr/bin/env python3
"""What carrying a program's code costs: a coordinator and an agent on
127.0.0.1 (the workspace's built binaries), a code directory of FILES files
holding MIB MiB of random (incompressible) bytes, then

- submit: `cohort train submit --config job.toml -q` (pack, GetCode, upload,
  CreateTraining), wall time;
- start: from that submit's return to the training RUNNING (the agent
  fetches the archive over FetchCode, checks its sha256, unpacks it
  read-only, starts the rank);
- again: the same submit once the coordinator holds the snapshot (pack and
  GetCode only; the agent's copy is reused).

Usage: bench/code/bench.py [--files 2000] [--mib 48] [--bin target/release]
Prints one line per figure; docs/benchmarks.md quotes them.
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(bin_dir: Path, url: str, *args: str) -> str:
    done = subprocess.run([str(bin_dir / "cohort"), "--coordinator", url, *args],
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def state(bin_dir: Path, url: str, training: str) -> str:
    for line in cli(bin_dir, url, "train", "get", training).splitlines():
        if line.startswith("state:"):
            return line.split()[1]
    return "?"


def wait_running(bin_dir: Path, url: str, training: str) -> float:
    start = time.monotonic()
    while True:
        now = state(bin_dir, url, training)
        if now in ("RUNNING", "SUCCEEDED"):
            return time.monotonic() - start
        if now in ("FAILED", "CANCELLED"):
            sys.exit(f"training {training} ended {now}")
        time.sleep(0.02)


def make_code(src: Path, files: int, mib: int) -> None:
    per_file = (mib << 20) // files
    for i in range(files):
        d = src / f"pkg{i % 40}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"part{i}.bin").write_bytes(os.urandom(per_file))
    (src / "train.py").write_text("import time\ntime.sleep(5)\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--mib", type=int, default=48)
    ap.add_argument("--bin", default=str(ROOT / "target/release"))
    args = ap.parse_args()
    bin_dir = Path(args.bin).resolve()
    work = Path(tempfile.mkdtemp(prefix="cohort-code-bench-"))
    procs = []
    try:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = open(work / "cluster.log", "w")
        procs.append(subprocess.Popen([str(bin_dir / "cohort-coordinator"), "--listen",
                                       f"127.0.0.1:{port}", "--data-dir", str(work / "coord")],
                                      stdout=log, stderr=log))
        procs.append(subprocess.Popen([str(bin_dir / "cohort-agent"), "--coordinator", url,
                                       "--name", "bench", "--address", "127.0.0.1",
                                       "--work-dir", str(work / "agent"),
                                       "--rank-binary", str(bin_dir / "cohort-rank"),
                                       "--simulate-gpus", "2:16GiB"], stdout=log, stderr=log))
        for _ in range(300):
            try:
                if cli(bin_dir, url, "gpus").count("GPU-SIM") >= 2:
                    break
            except subprocess.CalledProcessError:
                pass
            time.sleep(0.1)
        make_code(work / "src", args.files, args.mib)
        python = shutil.which("python3") or "/usr/bin/python3"
        job = work / "job.toml"
        job.write_text(f'[program]\ncommand = ["{python}", "train.py"]\ncode = "src"\n'
                       "memory_gib_per_rank = 1\n")
        print(f"code: {args.files} files, {args.mib} MiB of random bytes; binaries {bin_dir}")
        for label in ("first", "again"):
            t0 = time.monotonic()
            training = cli(bin_dir, url, "train", "submit", "--config", str(job), "--gpus", "1",
                           "-q", "--code-max-mib", str(args.mib + 16))
            submit = time.monotonic() - t0
            start = wait_running(bin_dir, url, training)
            print(f"{label}: submit (pack{', upload' if label == 'first' else ''}) "
                  f"{submit:.2f} s, then RUNNING after {start:.2f} s")
            cli(bin_dir, url, "train", "cancel", training)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
