"""Periodic tail: the channel ends in the same unit repeated verbatim.

Covers exact loops of any period from one character (``9999...``, ``.\\n\\n.\\n\\n``, emoji
runs) up to ``max_period`` characters, in any script: it compares characters, not words.

At each block the last :data:`_ANCHOR` characters are looked up in the recent text with
``str.rfind`` (C speed); the nearest earlier copy gives the candidate period ``p``. The
largest ``L`` with ``text[-L:] == text[-L-p:-p]`` is then found by doubling and bisection,
so the repeating span is ``L + p`` and the unit was seen ``(L + p) / p`` times.

Memory: the analyzer keeps only the last ``max_period + 256 + 32`` characters (1,312 by
default), not the whole run. It follows one run from block to block instead: a run of
period ``q`` goes on while each new block equals the ``q`` characters before it (one slice
comparison), so its start stays known however long it gets, and the span is counted from
that start. The nearest copy of the anchor is what starts a run being followed; a followed
run that is still going is kept even when the anchor finds a nearer copy inside the unit,
and a verdict may come from either. A run starts being followed with an exact start while
it is shorter than the window, which a loop is when its period first shows; only a run that
grew past the window while never being the nearest period is counted from the window's
start, an under-count that can only delay a verdict.

Copies of a long unit: a loop is certain once the second copy of its unit is complete, but
eight copies of a 600-character unit would be 4,800 characters of loop. So a run also fires
when the second copy of its unit is complete and at least ``copy_chars`` characters of it
repeat the text before them verbatim (``span - period >= max(period, copy_chars)``): a unit
of ``copy_chars`` characters or more at the end of its second copy, a shorter one once
``copy_chars`` characters are copies (600: a 300-character unit at the end of its third
copy, a 200-character one at the end of its fourth). Only consecutive copies count: a
paragraph quoted again after other words is no run at all. Code keeps its own rule (eight
copies, and ``recurrence``'s fourth copy): this one is off while the channel is inside a
``` fence and for a unit that holds a fence, or whose lines are mostly indented and are not
list items. On the healthy traces of tests/data/traces no thinking repeats more than 408
characters verbatim, consecutive or not (``benchmarks/verbatim.py``), and 600 is 1.47
times that.

The window is kept at two bytes a character at most. A str holding one character beyond
U+FFFF (an emoji, a mathematical italic letter) takes four bytes for each of its
characters, so each such character is stored as one of the 6,400 private-use characters
of the BMP (U+E000 plus its code point modulo 6,400). The mapping keeps the length, and
it keeps distinct characters apart within any stretch of 6,400 code points (the emoji
blocks span about 2,000), so runs and periods are those of the text. The unit quoted in
the evidence comes from the block's own text when it fits there, as it does for any
period up to a block.
"""

from __future__ import annotations

import re

from detectors.analyzer import Finding, excerpt
from detectors.base import Evidence
from detectors.blocks import BLOCK_CHARS, Block

_ANCHOR = 32
#: A line of code: indented by a tab or four spaces, and not a list item.
_CODE_LINE = re.compile(r"\n(?:\t| {4})[ \t]*(?![-*+•·>]\s|\d{1,3}[.):]\s)\S")
_FENCE = "```"
_ASTRAL = re.compile("[\U00010000-\U0010FFFF]")
_PRIVATE_USE, _PRIVATE_USE_SIZE = 0xE000, 6400


def _narrow(match: re.Match[str]) -> str:
    """The private-use character of the BMP that stands for a character beyond U+FFFF."""
    return chr(_PRIVATE_USE + ord(match.group()) % _PRIVATE_USE_SIZE)


def periodic_span(tail: str, max_period: int) -> tuple[int, int]:
    """Return ``(period, span)`` of the verbatim repetition that ends ``tail``
    (``(0, 0)`` when the last :data:`_ANCHOR` characters have no earlier copy). The span is
    at most ``len(tail)``."""
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

    __slots__ = (
        "_copy",
        "_fence",
        "_keep",
        "_max_period",
        "_min_repeats",
        "_min_span",
        "_q",
        "_recent",
        "_start",
        "copied",
    )

    def __init__(
        self, min_repeats: int, min_span: int, max_period: int, copy_chars: int = 0
    ) -> None:
        if max_period < 1:
            raise ValueError("periodic_max_period must be at least 1")
        self._min_repeats = min_repeats
        self._min_span = min_span
        self._max_period = max_period
        # The copy rule (0: off) and whether the channel is inside a ``` fence.
        self._copy = copy_chars
        self._fence = False
        # Enough for the anchor's search (max_period + _ANCHOR back) and for the block and
        # a period before it (BLOCK_CHARS + max_period back).
        self._keep = max_period + BLOCK_CHARS + _ANCHOR
        self._recent = ""
        # The run being followed: its period (0: none) and the channel offset it starts at.
        self._q = 0
        self._start = 0
        #: With the copy rule on: the characters of prose that the run ending the last
        #: block copies, once its unit's second copy is complete (else 0). The copy rule
        #: fires when it reaches ``copy_chars``; calibration reads it.
        self.copied = 0

    def analyze(self, block: Block) -> Finding | None:
        """Check whether the channel now ends in enough verbatim repeats."""
        text = block.text
        if not text.isascii():
            text = _ASTRAL.sub(_narrow, text)
        recent = self._recent + text
        # Fences opened or closed in this block (one cut by the block's start counts here,
        # where its last backtick is).
        if "`" in text and recent[-len(text) - 2 :].count(_FENCE) & 1:
            self._fence = not self._fence
        if len(recent) > self._keep:
            recent = recent[-self._keep :]
        self._recent = recent
        q = self._q
        if q and recent[-BLOCK_CHARS - q : -q] != recent[-BLOCK_CHARS:]:
            q = 0  # the block broke the run that was followed
        p, span = periodic_span(recent, self._max_period)
        if p and p == q:
            span = block.end - self._start  # the followed run, from its start
        if not q and p:
            # Follow the nearest period's run. Its start is exact unless the run already
            # fills the window (see the module docstring).
            q = p
            self._start = block.end - span
        self._q = q
        copy = self._copy
        copied = self._prose_copy(p, span, recent) if copy else 0
        fires = bool(p) and (self._fires(p, span) or copied >= copy > 0)
        if q and q != p:
            # The nearest copy of the anchor is closer than the followed run's period (the
            # anchor recurs inside the unit): the followed run is the loop, if any.
            q_span = block.end - self._start
            q_copied = self._prose_copy(q, q_span, recent) if copy else 0
            copied = max(copied, q_copied)
            if not fires and (self._fires(q, q_span) or q_copied >= copy > 0):
                p, span, fires = q, q_span, True
        self.copied = copied
        if not fires:
            return None
        unit = block.text[-p:] if p <= len(block.text) else recent[-p:]
        return Finding(
            f"the last {span} characters repeat a {p}-character unit {span // p} times",
            Evidence(excerpt(unit), p, span // p),
        )

    def _fires(self, period: int, span: int) -> bool:
        """The repeats rule (the copy rule reads :meth:`_prose_copy`)."""
        return span >= self._min_span and span >= self._min_repeats * period

    def _prose_copy(self, period: int, span: int, recent: str) -> int:
        """``span - period`` for a run whose second copy is complete and whose unit (the
        last ``period`` characters) is prose; else 0 (see the module docstring)."""
        copied = span - period
        if not period or copied < period or self._fence:
            return 0
        unit = recent[-period:]
        if _FENCE in unit or 2 * len(_CODE_LINE.findall(unit)) > unit.count("\n"):
            return 0
        return copied
