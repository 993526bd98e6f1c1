"""A program training that reports N progress points as fast as it can
(the console benchmark's 100,000-point training). Only rank 0 reports."""
import json
import os
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
if os.environ.get("RANK", "0") == "0":
    out = sys.stdout
    for step in range(1, n + 1):
        loss = 1.0 / (1.0 + step * 1e-3)
        out.write(json.dumps({"event": "progress", "step": step, "total_steps": n, "loss": loss, "reward": step % 997}) + "\n")
    out.write(json.dumps({"event": "finished", "step": n, "total_steps": n, "loss": 1.0 / (1.0 + n * 1e-3)}) + "\n")
    out.flush()
