"""A Hugging Face Trainer training on cohort: a plain Trainer script, with
cohort's callback beside its usual ones. Run it under torchrun, or as a
cohort `[program]` (docs/programs.md, "Hugging Face Trainer").

- The Trainer finds its peers from torchrun's variables (LOCAL_RANK,
  RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), which cohort sets for
  every rank.
- `output_dir` is `$COHORT_CHECKPOINT_DIR`: the Trainer writes its
  `checkpoint-<N>/` directories there every `save_steps`; cohort records
  each once its `trainer_state.json` is in it, keeps the newest
  `checkpoint.keep` and, on a restart, names the newest in
  `$COHORT_RESUME_DIR`: `train(resume_from_checkpoint=...)` goes on from
  it on every rank.
- `CohortCallback` turns the Trainer's logs into cohort progress lines, so
  the report, the console's curves and the ETA work.

The model learns a fixed random linear map.
"""

import argparse
import os
import time

import torch
import transformers

from cohort_train.hf import CohortCallback

D_IN, D_OUT = 16, 4


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--checkpoint-every", type=int, default=20)
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--step-sleep", type=float, default=0.0,
                   help="seconds to sleep per step (to watch it, or to test restarts)")
    return p.parse_args()


class Regression(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(D_IN, D_OUT)

    def forward(self, x, labels=None):
        out = self.layer(x)
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}


class Pairs(torch.utils.data.Dataset):
    def __init__(self, n=4096):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, D_IN, generator=g)
        self.y = self.x @ torch.randn(D_IN, D_OUT, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": self.y[i]}


class Pace(transformers.TrainerCallback):
    """Sleeps after each step (to watch it, or to test restarts)."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(self.seconds)


def main():
    args = parse_args()
    torch.manual_seed(0)
    training = transformers.TrainingArguments(
        output_dir=os.environ.get("COHORT_CHECKPOINT_DIR", "checkpoints"),
        max_steps=args.steps,
        per_device_train_batch_size=args.batch,
        learning_rate=args.lr,
        logging_steps=args.log_every,
        save_steps=args.checkpoint_every,
        report_to=[],
        disable_tqdm=True,
        use_cpu=not torch.cuda.is_available(),
        ddp_backend=None if torch.cuda.is_available() else "gloo",
    )
    trainer = transformers.Trainer(model=Regression(), args=training, train_dataset=Pairs(),
                                   callbacks=[CohortCallback(), Pace(args.step_sleep)])
    resume = os.environ.get("COHORT_RESUME_DIR")
    if resume:
        print(f"rank {training.process_index}: resuming from {resume}", flush=True)
    trainer.train(resume_from_checkpoint=resume)


if __name__ == "__main__":
    main()
