"""What the framework integrations share: a framework's logged values as
the numbers a progress line carries."""

import math
import re
from typing import Iterable, Optional

#: Names cohort keeps (docs/programs.md): letters, digits and `_ . / -`.
_NAME = re.compile(r"^[A-Za-z0-9_./-]{1,128}$")
#: Metrics per progress line cohort keeps.
MAX_METRICS = 64
#: Fields of the line itself, never taken from a framework's metrics.
_RESERVED = frozenset({"event", "step", "total_steps"})


def numbers(values: dict) -> dict:
    """The numeric values of ``values`` under names cohort keeps (a tensor
    or numpy scalar as its number; strings, lists and bad names left out),
    at most ``MAX_METRICS`` of them."""
    out = {}
    for name, value in values.items():
        if hasattr(value, "item") and getattr(value, "numel", lambda: 1)() == 1:
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if not _NAME.match(str(name)) or name in _RESERVED:
            continue
        out[str(name)] = value
        if len(out) == MAX_METRICS:
            break
    return out


def pick_loss(values: dict, keys: Iterable[str]) -> Optional[float]:
    """The first of ``keys`` that ``values`` holds."""
    for key in keys:
        if key in values:
            return float(values[key])
    return None


def finite(value: Optional[float]) -> bool:
    return value is not None and math.isfinite(value)
