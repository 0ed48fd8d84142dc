"""Restatement: one statement comes back verbatim again and again, whatever is around it.

A model that ruminates restates the same line (a formula, a conclusion, "Therefore, the
answer is B.") over and over, with varied sentences in between. Each copy is one short line
inside a block of new words, so the share of copied shingles per block (``recurrence``) stays
low. This detector counts whole statements instead: it fires when one statement has been
written ``copies`` times within the last ``window_chars`` characters of the channel.

A *statement* is one of:

- a line that is not a list item, not code (inside a ``` fence, or indented: code keeps
  its own rule in ``recurrence``), with whitespace collapsed, of at least
  :data:`MIN_CHARS` characters and :data:`MIN_WORDS` words (a word: two letters or more, or
  one CJK character). A line holding a digit needs :data:`MIN_WORDS_WITH_DIGITS` words: a
  short line with numbers is a step or a value of an enumeration ("A comes back (1, total
  4).", "Rope B burns out at t=30."), which a puzzle search legitimately writes many times;
- a whole list: consecutive list-item lines ("1.", "2)", "-", "A)" ... ; blank lines do not end
  a list) taken together as one statement, so a list only counts as a copy when every item is
  the same. Candidate schedules or tables whose items differ in their numbers or names never
  add up, however many of their items they share; a list of options re-enumerated verbatim
  does. A list of one item is read as a line;
- a whole run of lines of :data:`RUN_LINE` characters or less that each hold a number or
  a one-letter name (a capital standing alone, not "I"), up to a blank line or another
  line: candidates written as prose
  lines ("A and B cross, 3 minutes." ... "That makes 21 minutes in total, 4 too many.")
  share their steps, and their totals come back with every candidate of the same total, so
  a run counts only when it comes back whole, as a list does. A run of one line is read as
  that line, and a run longer than :data:`MAX_LINE` characters in all is no candidate: its
  lines are read one by one from there to its end.

Lines longer than :data:`MAX_LINE` characters are paragraphs, left to ``recurrence``.

Calibration (``benchmarks/families.py``): on the 1,885 healthy traces of tests/data/traces no
statement came back more than 5 times within 16,384 characters; loops that restate a
conclusion do it dozens of times.

Memory: the current line and the run being read (at most :data:`MAX_LINE` characters
each), a table of counters with each statement's 32-bit hash, and a ring of the last
:data:`RING` statements, a hash and a channel offset each (4.5 KiB at most), allocated
with the first statement. The table has at least twice as many slots as the ring holds
statements: :data:`FIRST_SLOTS` (320 bytes) at first, doubling as the ring fills, up to
:data:`SLOTS` (5 KiB) for a full ring; most channels keep a few dozen statements in their
window and never grow it. A statement older than the ring is forgotten even inside the
window. A count is the statement's copies in the window (a deletion shifts the probe run
back, so no lookup stops short of its statement), except that two statements with the
same hash count together (one in 2^32) and a count stops at 254.
"""

from __future__ import annotations

import re
from array import array
from zlib import crc32

from detectors.analyzer import Finding, excerpt
from detectors.base import Evidence
from detectors.blocks import Block
from detectors.tokenize import CJK_RANGES

#: A line shorter than this (after collapsing whitespace) is not a statement.
MIN_CHARS = 20
#: Words a line needs to be a statement ...
MIN_WORDS = 3
#: ... and a line with a digit in it.
MIN_WORDS_WITH_DIGITS = 5
#: Longer lines are paragraphs (``recurrence`` reads them); a list longer than this in
#: total is still one statement (its hash is chained item by item).
MAX_LINE = 320
#: A longer line is prose, never a step of a run.
RUN_LINE = 100
#: Statements remembered (their hash and offset) ...
RING = 512
#: ... in a table of at most this many counters (a power of two, at most half full) ...
SLOTS = 1024
#: ... and at first this many (it doubles while the ring holds more than half as many).
FIRST_SLOTS = 64

_ITEM = re.compile(r"\s*(?:[-*+•·>]|\(?\d{1,3}[.):]|\(?[A-Za-z][.)])\s")
#: A word: a CJK character, or two letters or more ("R_planet" holds the word "planet").
#: Where one starts: a CJK character, or two letters after a non-letter. These match a
#: line that holds at least MIN_WORDS, MIN_WORDS_WITH_DIGITS words, and stop there
#: (counting them all took half the detector's time, and listing them, on a CJK line of
#: 320 characters, 7 KiB: the chain's peak heap).
_START = rf"[{CJK_RANGES}]|(?<![^\W\d_{CJK_RANGES}])[^\W\d_{CJK_RANGES}]{{2}}"
_WORDS = re.compile(rf"(?:.*?(?:{_START})){{{MIN_WORDS}}}", re.S)
_WORDS_WITH_DIGITS = re.compile(rf"(?:.*?(?:{_START})){{{MIN_WORDS_WITH_DIGITS}}}", re.S)
#: The same for ASCII text, with plain classes (most lines).
_ASCII_WORDS = re.compile(rf"(?:.*?(?<![A-Za-z])[A-Za-z]{{2}}){{{MIN_WORDS}}}", re.S)
_ASCII_WORDS_WITH_DIGITS = re.compile(
    rf"(?:.*?(?<![A-Za-z])[A-Za-z]{{2}}){{{MIN_WORDS_WITH_DIGITS}}}", re.S
)
_DIGIT = re.compile(r"\d")
#: A number, or a one-letter name (a capital standing alone, not "I").
_STATE = re.compile(r"\d|[A-HJ-Z](?<!\w[A-HJ-Z])(?!\w)")
_SPACE = re.compile(r"\s+")


class RestatementAnalyzer:
    """Block analyzer for one channel; see the module docstring."""

    __slots__ = (
        "_copies",
        "_counts",
        "_fence",
        "_head",
        "_keys",
        "_line",
        "_line_at",
        "_list",
        "_list_at",
        "_list_first",
        "_list_items",
        "_most",
        "_ring_at",
        "_ring_key",
        "_run",
        "_run_chars",
        "_window",
    )

    def __init__(self, copies: int = 8, window_chars: int = 16384) -> None:
        if copies < 2:
            raise ValueError("restatement_copies must be at least 2")
        self._copies = copies
        self._window = window_chars
        # The line being written (None: longer than MAX_LINE, skipped to its end) and the
        # channel offset where it starts.
        self._line: str | None = ""
        self._line_at = 0
        # Inside a ``` fence.
        self._fence = False
        # The list being read: chained hash, items so far, offset of its first item, and
        # the first item's text (a list of one item is read as that line).
        self._list = 0
        self._list_items = 0
        self._list_at = 0
        self._list_first = ""
        # The run of state lines being read (line and offset each; -1 chars once it grew
        # past MAX_LINE: its lines are read one by one until it ends).
        self._run: list[tuple[str, int]] = []
        self._run_chars = 0
        # Copies per statement in the window: a counter and the statement's hash per slot,
        # probed linearly from the hash's low bits (allocated with the first statement).
        self._counts = bytearray()
        self._keys = array("I")
        # The statements in the window, oldest first from ``_head``: hash and offset.
        self._ring_key = array("I")
        self._ring_at = array("I")
        self._head = 0
        self._most = 0

    @property
    def most(self) -> int:
        """The most copies of one statement seen within the window so far."""
        return self._most

    def analyze(self, block: Block) -> Finding | None:
        """Read the block's complete lines; report a statement seen ``copies`` times."""
        text = block.text
        if "\n" not in text:
            if self._line is not None:
                longer = self._line + text
                self._line = longer if len(longer) <= MAX_LINE else None
            return None
        at = block.end - len(text)
        parts = text.split("\n")
        found = None
        for part in parts[:-1]:
            line = self._line
            start = self._line_at
            at += len(part) + 1
            self._line_at = at
            self._line = ""
            if line is None or len(line) + len(part) > MAX_LINE:
                seen = (self._end_run() if self._run else None) or self._end_list()
            else:
                seen = self._take(line + part, start)
            found = found or seen
        last = parts[-1]
        self._line = last if len(last) <= MAX_LINE else None
        return found

    def _take(self, raw: str, start: int) -> Finding | None:
        """One complete line starting at channel offset ``start``."""
        line = raw.strip()
        if not line:
            return self._end_run() if self._run else None  # it ends a run, not a list
        if "  " in line or "\t" in line:
            line = _SPACE.sub(" ", line)
        if line.startswith("```"):
            self._fence = not self._fence
            return None
        item = _ITEM.match(raw)
        if self._fence or (not item and raw[0] in " \t"):
            return None  # code keeps its own rule (recurrence's fourth copy)
        if item:
            found = self._end_run() if self._run else None
            if not self._list_items:
                self._list_at = start
                self._list_first = line
                self._list = 0
            self._list = crc32(line.encode(), self._list)
            self._list_items += 1
            return found
        found = self._end_list()
        if len(line) <= RUN_LINE and _STATE.search(line):
            return self._state_line(line, start) or found
        if self._run:
            found = self._end_run() or found
        return self._line_statement(line, start) or found

    def _state_line(self, line: str, start: int) -> Finding | None:
        """A line with a number or a one-letter name: a step of an enumeration, read with
        the lines of its run (see the module docstring)."""
        if self._run_chars < 0:
            return self._line_statement(line, start)
        self._run.append((line, start))
        self._run_chars += len(line)
        if self._run_chars <= MAX_LINE:
            return None
        # Too long for candidates: the lines count one by one, as they come from now on.
        run = self._run
        self._run = []
        self._run_chars = -1
        found = None
        for text, at in run:
            found = self._line_statement(text, at) or found
        return found

    def _end_run(self) -> Finding | None:
        """The run of state lines (if any) has ended: count it as one statement."""
        run = self._run
        self._run_chars = 0
        if not run:
            return None
        self._run = []
        if len(run) == 1:
            return self._line_statement(*run[0])
        h = 0
        for text, _ in run:
            h = crc32(text.encode(), h)
        return self._count(h ^ 0xA5A5, run[0][1], run[0][0], f"a run of {len(run)} lines")

    def _end_list(self) -> Finding | None:
        """The list being read (if any) has ended: count it as one statement."""
        items = self._list_items
        if not items:
            return None
        self._list_items = 0
        if items == 1:
            return self._line_statement(self._list_first, self._list_at)
        return self._count(self._list, self._list_at, self._list_first, f"a list of {items} items")

    def _line_statement(self, line: str, start: int) -> Finding | None:
        if len(line) < MIN_CHARS:
            return None
        # Whether the line holds enough words, read only as far as they go.
        few, enough = (
            (_ASCII_WORDS, _ASCII_WORDS_WITH_DIGITS) if line.isascii()
            else (_WORDS, _WORDS_WITH_DIGITS)
        )
        if not enough.match(line) and (not few.match(line) or _DIGIT.search(line)):
            return None
        return self._count(crc32(line.encode()), start, line, "a line")

    def _count(self, h: int, start: int, shown: str, what: str) -> Finding | None:
        """Count statement ``h`` (a 32-bit hash) written at ``start``, forget those that
        left the window, and fire on the ``copies``-th copy within it."""
        counts = self._counts
        if not counts:
            counts = self._counts = bytearray(FIRST_SLOTS)
            self._keys = array("I", bytes(4 * FIRST_SLOTS))
        ring_key, ring_at = self._ring_key, self._ring_at
        # Forget what left the window, and the oldest statement when the ring is full.
        oldest = start - self._window
        head = self._head
        live = len(ring_at) - head
        while live and (ring_at[head] < oldest or live >= RING):
            self._forget(ring_key[head])
            head += 1
            live -= 1
        if head >= 64:  # compact: the ring holds at most RING + 64 entries
            del ring_key[:head]
            del ring_at[:head]
            head = 0
        self._head = head
        if 2 * (live + 1) > len(counts):  # at most half full, with this one (SLOTS: RING)
            counts = self._grow()
        i = self._slot(h)
        self._keys[i] = h
        seen = counts[i] + 1
        if seen < 255:
            counts[i] = seen
        ring_key.append(h)
        ring_at.append(start)
        self._most = max(self._most, seen)
        if seen < self._copies:
            return None
        return Finding(
            f"{what} was written {seen} times within {self._window} characters",
            Evidence(excerpt(shown), 0, seen),
        )

    def _slot(self, h: int) -> int:
        """Where statement ``h`` is counted, or the free slot where it would go."""
        counts, keys = self._counts, self._keys
        mask = len(counts) - 1
        i = h & mask
        while counts[i] and keys[i] != h:
            i = (i + 1) & mask
        return i

    def _forget(self, h: int) -> None:
        """One copy of statement ``h`` left the window. A count that drops to 0 frees its
        slot, and the statements after it in the probe run shift back (linear probing's
        deletion), so every statement stays where a lookup finds it."""
        counts, keys = self._counts, self._keys
        i = self._slot(h)
        if counts[i] > 1:
            counts[i] -= 1
            return
        if not counts[i]:  # (a count stops at 254: more copies than that drain it early)
            return
        mask = len(counts) - 1
        counts[i] = 0
        j = i
        while True:
            j = (j + 1) & mask
            if not counts[j]:
                return
            home = keys[j] & mask
            # The entry at j moves into the hole at i unless its home lies in (i, j],
            # cyclically: then a lookup from its home still reaches it.
            if (i < home <= j) if i < j else (home > i or home <= j):
                continue
            counts[i], keys[i] = counts[j], keys[j]
            counts[j] = 0
            i = j

    def _grow(self) -> bytearray:
        """Double the table: each statement goes to its slot in the new one."""
        counts, keys = self._counts, self._keys
        size = 2 * len(counts)
        self._counts = grown = bytearray(size)
        self._keys = array("I", bytes(4 * size))
        for old in range(len(counts)):
            if counts[old]:
                i = self._slot(keys[old])
                self._keys[i] = keys[old]
                grown[i] = counts[old]
        return grown
