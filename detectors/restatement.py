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
each), a table of :data:`SLOTS`
counters with a 16-bit fingerprint each (3 KiB) and a ring of the last :data:`RING`
statements, a slot and a channel offset each (3.4 KiB at most),
allocated with the first statement. A statement older than the ring is forgotten even
inside the window; two statements that share a slot and a fingerprint count together (one in
2^26), and a statement whose probe chain lost a slot to expiry starts a new count: the
count can be off only in such rare cases, and only downward but for the shared slot.
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
#: Statements remembered (their slot and offset) ...
RING = 512
#: ... in a table of this many counters (a power of two, at most half full).
SLOTS = 1024

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
        "_fps",
        "_head",
        "_line",
        "_line_at",
        "_list",
        "_list_at",
        "_list_first",
        "_list_items",
        "_most",
        "_ring_at",
        "_ring_slot",
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
        # Copies per statement in the window: a counter and a 16-bit fingerprint per slot,
        # probed linearly from the hash's low bits (allocated with the first statement).
        self._counts = bytearray()
        self._fps = array("H")
        # The statements in the window, oldest first from ``_head``: slot and offset.
        self._ring_slot = array("H")
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
        """Count statement ``h`` written at ``start``, forget those that left the window,
        and fire on the ``copies``-th copy within it."""
        counts = self._counts
        if not counts:
            counts = self._counts = bytearray(SLOTS)
            self._fps = array("H", bytes(2 * SLOTS))
        fps = self._fps
        ring_slot, ring_at = self._ring_slot, self._ring_at
        # Forget what left the window, and the oldest statement when the ring is full.
        oldest = start - self._window
        head = self._head
        live = len(ring_at) - head
        while live and (ring_at[head] < oldest or live >= RING):
            counts[ring_slot[head]] -= 1
            head += 1
            live -= 1
        if head >= 64:  # compact: the ring holds at most RING + 64 entries
            del ring_slot[:head]
            del ring_at[:head]
            head = 0
        self._head = head
        fp = (h >> 16) | 1
        i = h & (SLOTS - 1)
        while counts[i] and fps[i] != fp:
            i = (i + 1) & (SLOTS - 1)
        fps[i] = fp
        seen = counts[i] + 1
        if seen < 255:
            counts[i] = seen
        ring_slot.append(i)
        ring_at.append(start)
        self._most = max(self._most, seen)
        if seen < self._copies:
            return None
        return Finding(
            f"{what} was written {seen} times within {self._window} characters",
            Evidence(excerpt(shown), 0, seen),
        )
