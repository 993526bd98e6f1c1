"""Helpers for a program that runs as a cohort training (docs/programs.md).

Everything here is optional: cohort starts a program with torchrun's
environment plus `COHORT_CHECKPOINT_DIR` and (on a restart)
`COHORT_RESUME_DIR`, and reads the JSON lines rank 0 prints. These helpers
write those lines and checkpoints the way cohort expects them.
"""

import json
import os
import shutil
import signal
import sys
import threading
from pathlib import Path
from typing import Callable, Optional

__all__ = [
    "is_main",
    "report",
    "finish",
    "checkpoint_dir",
    "resume_dir",
    "save_checkpoint",
    "step_of",
    "should_stop",
    "notice_file",
    "world_size",
    "world_sizes",
    "global_batch",
    "local_batch",
]

_STEP_PREFIX = "step-"


def is_main() -> bool:
    """Whether this process is rank 0 (true when RANK is unset: one process)."""
    return os.environ.get("RANK", "0") == "0"


def _numbers(metrics: dict) -> dict:
    out = {}
    for name, value in metrics.items():
        if value is None:
            continue
        if hasattr(value, "item"):  # a one-element tensor or numpy scalar
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"metric {name!r} must be a number, not {type(value).__name__}")
        out[name] = value
    return out


def _emit(event: str, fields: dict, stream=None) -> None:
    # allow_nan: a NaN loss is written as NaN, which cohort reads as NaN.
    line = json.dumps({"event": event, **fields}, allow_nan=True)
    print(line, file=stream or sys.stdout, flush=True)


def report(step: int, total_steps: Optional[int] = None, **metrics) -> None:
    """Print one `progress` line on rank 0: the step, the total when known,
    and any numeric metrics (`loss` among them) by name."""
    if not is_main():
        return
    fields = {"step": int(step)}
    if total_steps is not None:
        fields["total_steps"] = int(total_steps)
    fields.update(_numbers(metrics))
    _emit("progress", fields)


def finish(step: int, **metrics) -> None:
    """Print the `finished` line on rank 0 (its `loss`, when given, must be
    finite for the training to succeed)."""
    if not is_main():
        return
    _emit("finished", {"step": int(step), **_numbers(metrics)})


def _int_of(variable: str) -> Optional[int]:
    value = os.environ.get(variable, "").strip()
    return int(value) if value.isdigit() else None


def world_size() -> int:
    """The ranks this start runs with (WORLD_SIZE; 1 outside a launcher)."""
    return _int_of("WORLD_SIZE") or 1


def world_sizes() -> tuple:
    """The smallest and largest world size the training may be re-formed
    at (COHORT_MIN_WORLD_SIZE, COHORT_MAX_WORLD_SIZE): an elastic
    training's range, `(world_size(), world_size())` for one that never
    changes size or outside cohort."""
    world = world_size()
    return (_int_of("COHORT_MIN_WORLD_SIZE") or world,
            _int_of("COHORT_MAX_WORLD_SIZE") or world)


def global_batch() -> Optional[int]:
    """The global batch the training holds at every size
    (COHORT_GLOBAL_BATCH, from `[program] global_batch`); None when the
    config gives none."""
    return _int_of("COHORT_GLOBAL_BATCH")


def local_batch(global_batch_size: Optional[int] = None) -> int:
    """This rank's share of the global batch (`global_batch_size`, else
    COHORT_GLOBAL_BATCH) at the world size it runs at now: the same
    optimisation at every size of an elastic range. Raises ValueError when
    there is no global batch or the world size does not divide it (cohort
    only starts an elastic program at sizes that divide its global batch)."""
    total = global_batch_size if global_batch_size is not None else global_batch()
    if total is None:
        raise ValueError("no global batch: give one or set [program] global_batch")
    world = world_size()
    if total <= 0 or total % world:
        raise ValueError(f"the global batch {total} does not split over {world} ranks")
    return total // world


def _path_of(variable: str) -> Optional[Path]:
    value = os.environ.get(variable)
    return Path(value) if value else None


def checkpoint_dir() -> Optional[Path]:
    """Where rank 0 writes `step-<N>/` checkpoints (COHORT_CHECKPOINT_DIR)."""
    return _path_of("COHORT_CHECKPOINT_DIR")


def resume_dir() -> Optional[Path]:
    """The newest complete checkpoint to resume from (COHORT_RESUME_DIR);
    None on a fresh start."""
    return _path_of("COHORT_RESUME_DIR")


def resume_path() -> Optional[Path]:
    """The checkpoint to resume from itself (COHORT_RESUME_PATH): a
    Lightning checkpoint's `.ckpt` file, the directory otherwise; None on a
    fresh start."""
    return _path_of("COHORT_RESUME_PATH")


def step_of(path) -> Optional[int]:
    """The step a `step-<N>` directory name stands for; None for any other."""
    name = Path(path).name
    digits = name[len(_STEP_PREFIX):] if name.startswith(_STEP_PREFIX) else ""
    return int(digits) if digits.isdigit() else None


def _fsync_tree(root: Path) -> None:
    for directory, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(directory))


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(step: int, write_fn: Callable[[Path], None],
                    keep: Optional[int] = None,
                    directory: Optional[Path] = None) -> Optional[Path]:
    """Write checkpoint `step` on rank 0 and return its directory.

    `write_fn(tmp)` writes any files into `tmp`, a hidden directory beside
    the final one. Its files are fsynced, then it is renamed to
    `step-<N>` (8 digits), so a `step-<N>` directory is always complete.
    A `step-<N>` an earlier attempt left (this one resumed from before
    it) is replaced. With `keep`, all but the newest `keep` checkpoints are removed. Other
    ranks write nothing and get None.
    """
    if not is_main():
        return None
    root = Path(directory) if directory is not None else checkpoint_dir()
    if root is None:
        raise RuntimeError("no checkpoint directory: COHORT_CHECKPOINT_DIR is unset")
    if step < 0:
        raise ValueError(f"step {step} is negative")
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{_STEP_PREFIX}{int(step):08d}"
    tmp = root / f".{final.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        write_fn(tmp)
        _fsync_tree(tmp)
        if final.exists():
            # Left by an earlier attempt that got this far before it was
            # stopped; this attempt resumed from before it and redid the
            # work, so its own state is the one that continues.
            stale = root / f".{final.name}.stale-{os.getpid()}"
            os.rename(final, stale)
            os.rename(tmp, final)
            shutil.rmtree(stale, ignore_errors=True)
        else:
            os.rename(tmp, final)
        _fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if keep is not None:
        if keep < 1:
            raise ValueError("keep must be at least 1")
        steps = sorted((s, p) for p in root.iterdir()
                       if p.is_dir() and (s := step_of(p)) is not None)
        for _, old in steps[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return final



_NOTICE_LINE = "COHORT_PREEMPTED=1"
_stop_requested = False
_handler_installed = False


def notice_file() -> Optional[Path]:
    """The file cohort writes `COHORT_PREEMPTED=1` into when the rank gets a
    preemption notice (COHORT_NOTICE_FILE); None outside cohort."""
    return _path_of("COHORT_NOTICE_FILE")


def _on_sigterm(signum, frame) -> None:
    global _stop_requested
    _stop_requested = True


def _noticed() -> bool:
    path = notice_file()
    if path is None:
        return False
    try:
        return _NOTICE_LINE in path.read_text().split()
    except OSError:
        return False


def _agree(flag: bool) -> bool:
    """`flag` of any rank, when torch.distributed is in use (a MAX
    all-reduce on the default group), so every rank stops after the same
    step; `flag` alone otherwise."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return flag
    if dist.get_world_size() < 2:
        return flag
    torch = sys.modules["torch"]
    device = "cpu"
    if dist.get_backend() == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def should_stop() -> bool:
    """Whether cohort asked the training to stop: a preemption notice
    (`COHORT_PREEMPTED=1` in COHORT_NOTICE_FILE) or a SIGTERM, on any rank.

    Call it once per step on every rank. The first call (from the main
    thread) makes SIGTERM set a flag instead of ending the process, so the
    loop can finish its step, `save_checkpoint`, and return within the grace
    (`[runtime] preemption_grace`, default 60 s) before cohort kills it;
    the training then resumes from that checkpoint on its next placement.
    Under torch.distributed it also agrees across ranks (one small MAX
    all-reduce), so every rank stops after the same step.
    """
    global _handler_installed
    if not _handler_installed and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)
        _handler_installed = True
    return _agree(_stop_requested or _noticed())
