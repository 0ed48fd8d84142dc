"""Adaptive thinking budgets: follow the workload instead of hand tuning (pure).

Per key (model and policy rule) the sidecar keeps the thinking-token counts of the last
``window`` healthy requests (those that ended thinking by themselves, with no verdict).
Once ``min_samples`` are in, the budget is ``multiple`` times their ``quantile`` (p99 by
default), so a request has to think several times longer than nearly every healthy one
before the budget detector cuts it. Memory is bounded: ``window`` counts per key and at
most ``max_keys`` keys (the least recently updated key goes first).
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import Any

import numpy as np


def quantile_budget(samples: Sequence[int], *, quantile: float, multiple: float,
                    min_samples: int) -> int | None:
    """``multiple`` times the ``quantile`` of ``samples``; None below ``min_samples``."""
    if len(samples) < min_samples or not samples:
        return None
    q = float(np.quantile(np.asarray(samples, dtype=np.float64), quantile))
    return max(1, math.ceil(q * multiple))


class AdaptiveBudgets:
    """Sliding-window quantile estimates of healthy thinking lengths."""

    __slots__ = ("_budget", "_keys", "_max_keys", "_min", "_multiple", "_q", "_window")

    def __init__(self, *, window: int, quantile: float, multiple: float, min_samples: int,
                 max_keys: int = 256) -> None:
        self._window = window
        self._q = quantile
        self._multiple = multiple
        self._min = min_samples
        self._max_keys = max_keys
        self._keys: OrderedDict[str, deque[int]] = OrderedDict()
        self._budget: dict[str, int | None] = {}

    def observe(self, key: str, thinking_tokens: int) -> None:
        """Record one healthy request's thinking length."""
        samples = self._keys.get(key)
        if samples is None:
            samples = self._keys[key] = deque(maxlen=self._window)
            while len(self._keys) > self._max_keys:
                old, _ = self._keys.popitem(last=False)
                self._budget.pop(old, None)
        else:
            self._keys.move_to_end(key)
        samples.append(thinking_tokens)
        self._budget.pop(key, None)

    def budget(self, key: str) -> int | None:
        """The current budget for ``key``, or None while there are too few samples."""
        if key in self._budget:
            return self._budget[key]
        samples = self._keys.get(key)
        value = quantile_budget(list(samples), **self.params) if samples is not None else None
        self._budget[key] = value
        return value

    @property
    def params(self) -> dict[str, Any]:
        """The estimator's settings, for computing a budget from other samples."""
        return {"quantile": self._q, "multiple": self._multiple, "min_samples": self._min}

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Per key: sample count, the quantile estimate and the budget (for /debug/policy)."""
        out: dict[str, dict[str, Any]] = {}
        for key, samples in self._keys.items():
            budget = self.budget(key)
            out[key] = {"samples": len(samples), "budget_tokens": budget,
                        "quantile": self._q, "multiple": self._multiple}
        return out
