"""The Lightning logger and the Hugging Face callback with the real
packages (CPU, one process): the lines they print are what cohort reads."""

import json
import math

import lightning
import pytest
import torch
import transformers

# The real packages, installed by scripts/setup.sh (test-tools): a missing
# one fails these tests rather than skipping them.


def progress_lines(out: str):
    """The JSON lines cohort reads (a framework prints other lines too:
    the Trainer its log dicts, which cohort keeps as log lines)."""
    parsed = []
    for line in out.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and "event" in value:
            parsed.append(value)
    return parsed


def data(n=64):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=g)
    return x, x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])


def test_lightning_logger_reports_each_logged_step_and_the_end(monkeypatch, capsys, tmp_path):
    from cohort_train.lightning import CohortLogger

    monkeypatch.setenv("RANK", "0")

    class Regression(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, _):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    x, y = data()
    torch.manual_seed(0)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    trainer = lightning.Trainer(max_steps=12, logger=CohortLogger(total_steps=12),
                                log_every_n_steps=2, accelerator="cpu", devices=1,
                                enable_checkpointing=False, enable_progress_bar=False,
                                enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(Regression(), loader)
    lines = progress_lines(capsys.readouterr().out)
    progress = [l for l in lines if l["event"] == "progress"]
    assert [l["step"] for l in progress] == [1, 3, 5, 7, 9, 11], progress
    assert all(l["total_steps"] == 12 and math.isfinite(l["loss"]) for l in progress)
    assert all(l["loss"] == l["train_loss"] for l in progress)
    assert progress[-1]["loss"] < progress[0]["loss"], "it learned"
    assert lines[-1] == {"event": "finished", "step": progress[-1]["step"],
                         "loss": progress[-1]["loss"]}


def test_lightning_logger_is_quiet_on_other_ranks(monkeypatch, capsys):
    from cohort_train.lightning import CohortLogger

    monkeypatch.setenv("RANK", "1")
    logger = CohortLogger()
    logger.log_metrics({"loss": 1.0}, step=3)
    logger.finalize("success")
    assert capsys.readouterr().out == ""


def test_hugging_face_callback_reports_logs_and_the_end(monkeypatch, capsys, tmp_path):
    from cohort_train.hf import CohortCallback

    monkeypatch.setenv("RANK", "0")

    class Regression(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def forward(self, x, labels=None):
            out = self.layer(x)
            return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}

    x, y = data()
    rows = [{"x": x[i], "labels": y[i]} for i in range(len(x))]
    torch.manual_seed(0)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=20, logging_steps=4, per_device_train_batch_size=8,
        learning_rate=0.1, report_to=[], save_strategy="no", disable_tqdm=True, use_cpu=True)
    trainer = transformers.Trainer(model=Regression(), args=args, train_dataset=rows,
                                   callbacks=[CohortCallback()])
    trainer.train()
    lines = progress_lines(capsys.readouterr().out)
    logged = [l for l in lines if l["event"] == "progress" and "loss" in l]
    assert [l["step"] for l in logged] == [4, 8, 12, 16, 20], lines
    assert all(l["total_steps"] == 20 and "learning_rate" in l for l in logged)
    assert logged[-1]["loss"] < logged[0]["loss"] / 2, "it learned"
    assert lines[-1] == {"event": "finished", "step": 20, "loss": logged[-1]["loss"]}
