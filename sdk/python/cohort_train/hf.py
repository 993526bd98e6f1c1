"""A Hugging Face ``transformers`` Trainer callback that reports to cohort
(docs/programs.md).

    from cohort_train.hf import CohortCallback
    trainer = transformers.Trainer(..., callbacks=[CohortCallback()])

Each of the Trainer's logs (every ``logging_steps``; its evaluations too)
becomes a ``progress`` line from the main process: ``global_step``,
``total_steps`` (the Trainer's ``max_steps``), ``loss`` and every other
logged number by name (``eval_loss``, ``learning_rate``, ``grad_norm``...).
The end of training writes the ``finished`` line with the last training
loss logged. Pass ``report_to=[]`` (or keep your own trackers) as you like:
this callback is independent of them.
"""

from typing import Optional

from transformers import TrainerCallback

from . import _metrics, _emit


class CohortCallback(TrainerCallback):
    """The Trainer's logs as cohort progress lines (main process only)."""

    def __init__(self):
        self._loss: Optional[float] = None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero:
            return
        values = _metrics.numbers(logs or {})
        if "loss" in values:
            self._loss = float(values["loss"])
        fields = {"step": int(state.global_step)}
        if state.max_steps and state.max_steps > 0:
            fields["total_steps"] = int(state.max_steps)
        _emit("progress", {**fields, **values})

    def on_train_end(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        fields = {"step": int(state.global_step)}
        if self._loss is not None:
            fields["loss"] = self._loss
        _emit("finished", fields)
