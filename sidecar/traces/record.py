"""What a trace record holds, and which attempts become one (pure).

A :class:`Capture` is taken when a watched attempt ends: its reasoning (as far as it was
kept), the verdict, the model and the request's bytes when prompts are kept. It becomes
one JSON line in the format of ``tests/data/traces/`` (:meth:`Capture.record`), so
``runaway-sidecar replay`` and ``calibrate`` read recorded traffic as they read those:

- ``text`` is ``<think>`` + the reasoning, + ``</think>`` once the answer began: exactly
  the characters the thinking channel's chain was fed, so a replay cuts its blocks where
  the live chain did and reaches the same verdict at the same offset. The answer itself is
  not recorded;
- ``source``, ``model``, ``thinking_chars``, ``thinking_ended`` and ``label`` (null: the
  operator labels it, in ``labels.jsonl`` beside the traces) as in the shared traces;
- ``id`` (unique per record), ``kind``, ``mode``, ``recorded_at``, ``thinking_tokens``
  (counted by the server), ``truncated`` (the reasoning went past
  ``record.max_reasoning_chars``), ``step`` and ``attempt``, and ``verdict``: the
  detector, channel, reason, evidence and position, ``at_char`` as an offset in ``text``
  (null for a verdict on the answer, which is not recorded);
- ``prompt``, only when ``record.exclude_prompt`` is false: the request's ``messages``,
  ``prompt``, ``system``, ``input`` and ``instructions``.

:class:`Reservoir` keeps the hourly samples of healthy and budget attempts.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from detectors import Verdict
from detectors.base import THINKING
from sidecar.labels import Mode, RecordKind

OPEN_TAG = "<think>"
CLOSE_TAG = "</think>"
#: Verdicts that are budgets, not loops: sampled like healthy attempts, not all kept.
BUDGETS = frozenset({"thinking_token_budget", "thinking_seconds_budget", "stall"})
#: The request fields a record keeps as its prompt when prompts are kept.
PROMPT_FIELDS = ("system", "instructions", "messages", "prompt", "input")
#: Distinct models sampled per hour; later ones share one reservoir, ``OTHER_MODEL``.
MAX_MODELS = 64
OTHER_MODEL = "other"


def kind_of(verdict: Verdict | None) -> RecordKind:
    """The kind of an attempt that ended with ``verdict``."""
    if verdict is None:
        return "healthy"
    return "budget" if verdict.detector in BUDGETS else "detection"


@dataclass(frozen=True, slots=True)
class Capture:
    """One ended attempt, as the recorder takes it (see the module docstring)."""

    kind: RecordKind
    request_id: str
    attempt: int
    step: str
    model: str | None
    mode: Mode
    wall: float
    reasoning: str
    truncated: bool
    thinking_ended: bool
    thinking_tokens: int
    verdict: Verdict | None = None
    #: The request's bytes, when prompts are kept (parsed by the writer, off the loop).
    raw: bytes | None = field(default=None, repr=False)

    def record(self) -> dict[str, Any]:
        """The JSON object of this capture (see the module docstring), with a new ``id``
        (made here, by the writer thread, not on the event loop)."""
        text = OPEN_TAG + self.reasoning + (CLOSE_TAG if self.thinking_ended else "")
        out: dict[str, Any] = {
            "id": uuid.uuid4().hex,
            "source": f"runaway-sidecar:{self.request_id}#{self.attempt}",
            "model": self.model,
            "text": text,
            "label": None,
            "kind": self.kind,
            "mode": self.mode,
            "recorded_at": datetime.fromtimestamp(self.wall, UTC).isoformat(
                timespec="seconds"),
            "thinking_chars": len(self.reasoning),
            "thinking_ended": self.thinking_ended,
            "thinking_tokens": self.thinking_tokens,
            "truncated": self.truncated,
            "step": self.step,
            "attempt": self.attempt,
            "verdict": None if self.verdict is None else _verdict(self.verdict),
        }
        if self.raw is not None:
            out["prompt"] = prompt_of(self.raw)
        return out

    def line(self) -> bytes:
        """The record as one JSON line (what the writer appends)."""
        return orjson.dumps(self.record()) + b"\n"


def _verdict(v: Verdict) -> dict[str, Any]:
    return {
        "detector": v.detector,
        "channel": v.channel,
        "reason": v.reason,
        "excerpt": v.evidence.excerpt,
        "period": v.evidence.period,
        "count": v.evidence.count,
        "at_token": v.at_token,
        # The chain counts the characters it was fed; on thinking they are the reasoning's.
        "at_char": len(OPEN_TAG) + v.at_char if v.channel == THINKING else None,
    }


def prompt_of(raw: bytes) -> dict[str, Any]:
    """The prompt fields of a request body (an empty object if it is not JSON)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}
    if not isinstance(body, dict):
        return {}
    return {k: body[k] for k in PROMPT_FIELDS if k in body}


@dataclass(slots=True)
class _Pool:
    """One model's reservoir of one kind for one hour."""

    hour: int
    seen: int = 0
    kept: list[Capture] = field(default_factory=list)


class Reservoir:
    """Per model and kind, a uniform random sample of at most ``size`` captures of each
    hour (Algorithm R: the n-th capture of the hour replaces a random kept one with
    probability size/n). A pool is handed back for writing once its hour is over
    (:meth:`over`, asked with each capture's hour), or at :meth:`drain`. At most
    :data:`MAX_MODELS` models are kept apart per hour; the others share one pool.

    Pure: the hour is an argument and the random source is injected."""

    def __init__(self, size: int, rng: random.Random | None = None) -> None:
        #: Captures kept per model, kind and hour (0: none).
        self.size = size
        self._rng = rng or random.Random()  # noqa: S311 (sampling, not security)
        self._pools: dict[tuple[str, RecordKind], _Pool] = {}
        # The earliest hour a pool holds (no pool: none), so most offers scan nothing.
        self._oldest: int | None = None

    def offer(self, capture: Capture, hour: int) -> None:
        """Offer a capture of ``hour`` (take the pools of earlier hours out first:
        :meth:`over`)."""
        if self.size <= 0:
            return
        model = capture.model or OTHER_MODEL
        key = (model, capture.kind)
        pool = self._pools.get(key)
        if pool is None:
            if len({m for m, _ in self._pools}) >= MAX_MODELS:
                key = (OTHER_MODEL, capture.kind)
                pool = self._pools.get(key)
            if pool is None:
                pool = self._pools[key] = _Pool(hour)
                if self._oldest is None or hour < self._oldest:
                    self._oldest = hour
        pool.seen += 1
        if len(pool.kept) < self.size:
            pool.kept.append(capture)
        else:
            slot = self._rng.randrange(pool.seen)
            if slot < self.size:
                pool.kept[slot] = capture

    def over(self, hour: int) -> list[Capture]:
        """Take out the pools of the hours before ``hour``: their captures, to write."""
        if self._oldest is None or self._oldest >= hour:
            return []
        old = [key for key, pool in self._pools.items() if pool.hour < hour]
        out: list[Capture] = []
        for key in old:
            out += self._pools.pop(key).kept
        self._oldest = min((p.hour for p in self._pools.values()), default=None)
        return out

    def drain(self) -> list[Capture]:
        """Take out every pool (at shutdown)."""
        out = [c for pool in self._pools.values() for c in pool.kept]
        self._pools.clear()
        self._oldest = None
        return out

    @property
    def held(self) -> int:
        """Captures held, waiting for their hour to end."""
        return sum(len(p.kept) for p in self._pools.values())
