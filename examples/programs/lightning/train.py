"""A PyTorch Lightning training on cohort: a plain Lightning script, with
cohort's logger beside its usual callbacks. Run it under torchrun, or as a
cohort `[program]` (docs/programs.md, "PyTorch Lightning").

- Lightning finds its peers from torchrun's variables (RANK, WORLD_SIZE,
  LOCAL_WORLD_SIZE, GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), which
  cohort sets for every rank.
- `ModelCheckpoint` writes its `*.ckpt` files into
  `$COHORT_CHECKPOINT_DIR`; cohort records each (its step is the file's
  `global_step`), keeps the newest `checkpoint.keep` and, on a restart,
  names the newest in `$COHORT_RESUME_PATH`: `fit(ckpt_path=...)` goes on
  from it on every rank.
- `CohortLogger` turns what the model `self.log`s into cohort progress
  lines, so the report, the console's curves and the ETA work.

The model learns a fixed random linear map.
"""

import argparse
import os
import time

import lightning
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from cohort_train.lightning import CohortLogger

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


class Regression(lightning.LightningModule):
    def __init__(self, lr: float, step_sleep: float):
        super().__init__()
        self.layer = torch.nn.Linear(D_IN, D_OUT)
        self.lr, self.step_sleep = lr, step_sleep

    def training_step(self, batch, _):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        time.sleep(self.step_sleep)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def data(batch: int):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4096, D_IN, generator=g)
    y = x @ torch.randn(D_IN, D_OUT, generator=g) + 0.01 * torch.randn(4096, D_OUT, generator=g)
    # Lightning gives each rank its share (a DistributedSampler).
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=batch,
                                       shuffle=True)


def main():
    args = parse_args()
    world = int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    run_dir = os.environ.get("COHORT_RUN_DIR", ".")
    torch.manual_seed(0)
    trainer = lightning.Trainer(
        accelerator="cpu" if not torch.cuda.is_available() else "gpu",
        devices=local,
        num_nodes=world // local,
        strategy="ddp" if world > 1 else "auto",
        max_steps=args.steps,
        logger=CohortLogger(total_steps=args.steps),
        log_every_n_steps=args.log_every,
        callbacks=[ModelCheckpoint(dirpath=os.environ.get("COHORT_CHECKPOINT_DIR", "checkpoints"),
                                   every_n_train_steps=args.checkpoint_every, save_top_k=-1)],
        default_root_dir=run_dir,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    resume = os.environ.get("COHORT_RESUME_PATH")
    if resume:
        print(f"rank {trainer.global_rank}: resuming from {resume}", flush=True)
    trainer.fit(Regression(args.lr, args.step_sleep), data(args.batch), ckpt_path=resume)


if __name__ == "__main__":
    main()
