"""Periodic tail: the channel ends in the same unit repeated verbatim.

Covers exact loops of any period from one character (``9999...``, ``.\\n\\n.\\n\\n``, emoji
runs) up to ``max_period`` characters, in any script: it compares characters, not words.

At each block the last :data:`_ANCHOR` characters are looked up in the recent tail with
``str.rfind`` (C speed); the nearest earlier copy gives the candidate period ``p``. The
largest ``L`` with ``tail[-L:] == tail[-L-p:-p]`` is then found by doubling and bisection,
so the repeating span is ``L + p`` and the unit was seen ``(L + p) / p`` times.
"""

from __future__ import annotations

from detectors.analyzer import Finding, excerpt
from detectors.base import Evidence
from detectors.blocks import TAIL_CHARS, Block

_ANCHOR = 32


def periodic_span(tail: str, max_period: int) -> tuple[int, int]:
    """Return ``(period, span)`` of the verbatim repetition that ends ``tail``
    (``(0, 0)`` when the last :data:`_ANCHOR` characters have no earlier copy)."""
    n = len(tail)
    if n < 2 * _ANCHOR:
        return 0, 0
    anchor = tail[n - _ANCHOR :]
    j = tail.rfind(anchor, max(0, n - _ANCHOR - max_period), n - 1)
    if j < 0:
        return 0, 0
    p = n - _ANCHOR - j
    # tail[n-L:] == tail[n-L-p:n-p] holds for L = _ANCHOR; grow L while it keeps holding.
    good = _ANCHOR
    limit = n - p
    bad = limit + 1
    probe = good * 2
    while probe <= limit:
        if tail[n - probe :] == tail[n - probe - p : n - p]:
            good = probe
            probe *= 2
        else:
            bad = probe
            break
    while bad - good > 1:
        mid = (good + bad) // 2
        if mid <= limit and tail[n - mid :] == tail[n - mid - p : n - p]:
            good = mid
        else:
            bad = mid
    return p, good + p


class PeriodicAnalyzer:
    """Block analyzer for one channel; see the module docstring."""

    __slots__ = ("_max_period", "_min_repeats", "_min_span")

    def __init__(self, min_repeats: int, min_span: int, max_period: int) -> None:
        self._min_repeats = min_repeats
        self._min_span = min_span
        self._max_period = min(max_period, TAIL_CHARS // 2)

    def analyze(self, block: Block) -> Finding | None:
        """Check whether the channel now ends in enough verbatim repeats."""
        p, span = periodic_span(block.tail, self._max_period)
        if p == 0 or span < self._min_span or span < self._min_repeats * p:
            return None
        unit = block.tail[-p:]
        return Finding(
            f"the last {span} characters repeat a {p}-character unit {span // p} times",
            Evidence(excerpt(unit), p, span // p),
        )
