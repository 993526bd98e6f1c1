"""A PyTorch Lightning logger that reports to cohort (docs/programs.md).

    from cohort_train.lightning import CohortLogger
    trainer = lightning.Trainer(max_steps=1000, logger=CohortLogger(total_steps=1000))

Every ``self.log(...)`` Lightning hands its loggers becomes a ``progress``
line from rank 0 (the step, ``total_steps`` when given, the logged
numbers by name, and ``loss``: the first of ``loss``, ``train_loss``,
``train_loss_step`` logged, or ``loss_key``); a successful fit ends with a
``finished`` line carrying the last loss. cohort's report, curves, ETA and
cost analysis then work as for its own trainings. Works with ``lightning``
and with the older ``pytorch_lightning`` package.
"""

from typing import Optional

from . import _metrics, _emit, is_main

try:
    from lightning.pytorch.loggers.logger import Logger
    from lightning.pytorch.utilities import rank_zero_only
except ImportError:  # the older package name
    from pytorch_lightning.loggers.logger import Logger
    from pytorch_lightning.utilities import rank_zero_only

LOSS_KEYS = ("loss", "train_loss", "train_loss_step")


class CohortLogger(Logger):
    """Lightning's logged metrics as cohort progress lines (rank 0 only)."""

    def __init__(self, total_steps: Optional[int] = None, loss_key: Optional[str] = None):
        super().__init__()
        self._total = total_steps
        self._loss_keys = (loss_key,) if loss_key else LOSS_KEYS
        self._step: Optional[int] = None
        self._loss: Optional[float] = None

    @property
    def name(self) -> str:
        return "cohort"

    @property
    def version(self) -> str:
        return "0"

    @rank_zero_only
    def log_hyperparams(self, params, *args, **kwargs) -> None:
        """cohort keeps the training's config itself."""

    @rank_zero_only
    def log_metrics(self, metrics: dict, step: Optional[int] = None) -> None:
        if not is_main():
            return
        values = _metrics.numbers(metrics)
        step = int(step if step is not None else values.get("step", self._step or 0))
        loss = _metrics.pick_loss(values, self._loss_keys)
        fields = {"step": step}
        if self._total is not None:
            fields["total_steps"] = int(self._total)
        if loss is not None:
            values["loss"] = loss
            self._loss = loss
        self._step = step
        _emit("progress", {**fields, **values})

    @rank_zero_only
    def finalize(self, status: str) -> None:
        """After a successful fit: the ``finished`` line (a failed one ends
        without it, and its exit code says what happened)."""
        if status != "success" or self._step is None or not is_main():
            return
        fields = {"step": self._step}
        if self._loss is not None:
            fields["loss"] = self._loss
        _emit("finished", fields)
