"""A training that only counts steps: the smallest program that behaves as a
cohort training should. It reports progress, checkpoints every few steps
with cohort_train, resumes from COHORT_RESUME_DIR, and honours a preemption
notice (cohort_train.should_stop): it checkpoints the step it is at and
stops within its grace. The scheduler's tests and the simulator's fidelity
benchmark run it; it needs no torch and no GPU.

    train.py --steps 200 --step-seconds 0.05 --checkpoint-every 20
             [--ignore-notice] [--checkpoint-seconds S] [--stop-seconds S]

--ignore-notice: SIGTERM and the notice are ignored (the agent kills it at
the end of the grace, and it resumes from its last periodic checkpoint).
--checkpoint-seconds: each checkpoint takes this long to write (so a notice
may arrive in the middle of one). --stop-seconds: how long it takes to stop
once it has checkpointed on a notice.
"""

import argparse
import json
import os
import signal
import sys
import time

import cohort_train as ct


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--step-seconds", type=float, default=0.05)
    p.add_argument("--checkpoint-every", type=int, default=20)
    p.add_argument("--ignore-notice", action="store_true")
    p.add_argument("--checkpoint-seconds", type=float, default=0.0)
    p.add_argument("--stop-seconds", type=float, default=0.0)
    return p.parse_args()


def resume_step() -> int:
    resume = ct.resume_dir()
    if resume is None:
        return 0
    with open(resume / "state.json") as f:
        return int(json.load(f)["step"])


def save(step: int, total: int, seconds: float, noticing: bool) -> None:
    def write(tmp):
        with open(tmp / "state.json", "w") as f:
            json.dump({"step": step}, f)
        if seconds > 0:
            # A slow write says so first (a test times its notice by it).
            ct.report(step, total_steps=total, writing=1)
            time.sleep(seconds)

    before = noticing and ct.should_stop()
    ct.save_checkpoint(step, write, keep=3)
    if noticing and not before and ct.should_stop():
        ct.report(step, total_steps=total, noticed_mid_write=1)


def main() -> int:
    args = parse()
    if args.ignore_notice:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        ct.should_stop()  # from now on SIGTERM asks to stop
    start = resume_step()
    rank = int(os.environ.get("RANK", "0"))
    print(f"rank {rank}: steps {start} to {args.steps}", file=sys.stderr, flush=True)
    saved = start
    for step in range(start, args.steps):
        time.sleep(args.step_seconds)
        done = step + 1
        ct.report(done, total_steps=args.steps, loss=1.0 / done, resumed_from=start)
        noticing = not args.ignore_notice
        if done % args.checkpoint_every == 0 and done < args.steps:
            save(done, args.steps, args.checkpoint_seconds, noticing)
            saved = done
        if noticing and done < args.steps and ct.should_stop():
            if saved != done:
                save(done, args.steps, 0.0, False)
            print(f"rank {rank}: notice: stopped after step {done}", file=sys.stderr, flush=True)
            time.sleep(args.stop_seconds)
            return 0
    ct.finish(args.steps, loss=1.0 / args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
