"""Recurrence: near-identical segments keep coming back with no new content.

This is the central loop signal. Every pseudo-token k-gram (shingle) of the channel is
hashed into a bounded counting table that remembers the last ``history`` shingles. A shingle
*recurs* when it was already seen ``min_seen`` times (so a paragraph re-checked once does not
count, its third copy does). The score is the share of recurring shingles over a sliding
window of blocks; a loop keeps it near 1 while healthy reasoning, which re-checks a step
once and moves on, stays well below.

Verbatim paragraphs repeated in a shifting order (A A B A C ...), numbered restarts
("787. Fill ... 788. Fill ...") and phrase-level loops all score the same way: the order of
recurrence does not matter, only that the text brings nothing new. A number that starts a
line is folded to ``#`` so a counter that keeps going does not look like new content;
other numbers are kept, so "Year 5: ... Year 6: ..." arithmetic still reads as progress.

Memory: a ``4 * history`` byte count table plus a ``history`` ring of 2-byte slots
(32 + 16 = 48 KiB at the default 8192) and a window of a few integers.
"""

from __future__ import annotations

from array import array
from collections import deque
from zlib import crc32

from detectors.analyzer import Finding, excerpt
from detectors.base import Evidence
from detectors.blocks import Block

_MASK = (1 << 64) - 1
_BASE = 0x100000001B3
_MIX = 0x9E3779B97F4A7C15


class RecurrenceAnalyzer:
    """Block analyzer for one channel; see the module docstring."""

    __slots__ = (
        "_bits",
        "_counts",
        "_hist",
        "_k",
        "_last",
        "_li",
        "_min_seen",
        "_n",
        "_pow",
        "_prev",
        "_ring",
        "_rolling",
        "_rpos",
        "_same",
        "_seen_tokens",
        "_sum_n",
        "_sum_rec",
        "_threshold",
        "_win",
        "_window",
    )

    def __init__(
        self, shingle: int, history: int, min_seen: int, window_blocks: int, threshold: float
    ) -> None:
        if history & (history - 1) or not 256 <= history <= 16384:
            raise ValueError("recurrence_history must be a power of two in 256..16384")
        self._k = shingle
        self._hist = history
        table = history * 4
        self._bits = table.bit_length() - 1
        self._counts = bytearray(table)
        self._ring = array("H", bytes(2 * history))
        self._rpos = 0
        self._n = 0
        self._min_seen = min_seen
        self._threshold = threshold
        self._window = window_blocks
        self._win: deque[tuple[int, int]] = deque()
        self._sum_n = 0
        self._sum_rec = 0
        self._last = [0] * shingle
        self._li = 0
        self._rolling = 0
        self._pow = pow(_BASE, shingle, 1 << 64)
        self._seen_tokens = 0
        # Whether the last block ended at a line start, to fold list numbers across blocks.
        self._prev = "\n"
        self._same = ""

    def analyze(self, block: Block) -> Finding | None:
        """Score the block's shingles and the sliding window; report when over threshold."""
        counts = self._counts
        ring = self._ring
        last = self._last
        k = self._k
        hist = self._hist
        min_seen = self._min_seen
        shift = 64 - self._bits
        rolling = self._rolling
        li = self._li
        rpos = self._rpos
        n_seen = self._seen_tokens
        top = 0
        rec = n = 0
        at_line_start = self._prev == "\n"
        same = self._same
        for raw in block.toks:
            tok = raw
            if tok == "\n":
                at_line_start = True
                continue
            # A run of one token ("-----", "🌰🌰🌰") is one shingle unit, as in BPE.
            if tok == same:
                continue
            same = tok
            if at_line_start:
                at_line_start = False
                if tok.isdigit():
                    tok = "#"
            h = crc32(tok.lower().encode())
            old = last[li]
            last[li] = h
            li = li + 1 if li + 1 < k else 0
            rolling = (rolling * _BASE + h - old * self._pow) & _MASK
            n_seen += 1
            if n_seen < k:
                continue
            slot = ((rolling * _MIX) & _MASK) >> shift
            c = counts[slot]
            n += 1
            if c >= min_seen:
                rec += 1
                top = max(top, c)
            if c < 255:
                counts[slot] = c + 1
            if self._n >= hist:
                o = ring[rpos]
                if counts[o]:
                    counts[o] -= 1
            else:
                self._n += 1
            ring[rpos] = slot
            rpos = rpos + 1 if rpos + 1 < hist else 0
        self._rolling, self._li, self._rpos, self._seen_tokens = rolling, li, rpos, n_seen
        self._prev = "\n" if at_line_start else ""
        self._same = same
        win = self._win
        win.append((rec, n))
        self._sum_rec += rec
        self._sum_n += n
        if len(win) > self._window:
            r0, n0 = win.popleft()
            self._sum_rec -= r0
            self._sum_n -= n0
        if len(win) < self._window or self._sum_n < 8 * self._window:
            return None
        score = self._sum_rec / self._sum_n
        if score < self._threshold:
            return None
        return Finding(
            f"{score:.0%} of the last {self._sum_n} shingles were seen {min_seen}+ times before",
            Evidence(excerpt(block.text), 0, top + 1),
        )
