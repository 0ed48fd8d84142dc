"""Recurrence: near-identical segments keep coming back with no new content.

This is the central loop signal. Every pseudo-token k-gram (shingle) of the channel is
hashed into a bounded table that counts the shingles among the last ``history`` ones. Per
256-character block two shares are measured: ``seen1``, the share of the block's shingles
already seen at least once, and ``seen2``, the share already seen ``min_seen`` (2) times.
Two rules read them:

- *window*: ``seen2`` averaged over a sliding window of blocks reaches ``threshold``. The
  third copy of anything counts, so a paragraph re-checked once does not; a verbatim loop
  keeps the score near 1 while healthy reasoning stays well below.
- *accumulation* (a one-sided CUSUM over the whole stream): ``S = max(0, S + seen1 -
  drift)`` fires when ``S`` reaches ``evidence``. A block that is mostly copied from the
  recent past adds to ``S``; a block of fresh text takes up to ``drift`` off again. A
  healthy trace re-checks a step once and moves on, so its copied bursts stay short and
  drain (on the calibration traces ``S`` never passed 1.5); a loop keeps copying, so
  ``S`` keeps growing whatever the order or the length of its copies, and it fires
  during the second or third copy instead of waiting for a window full of third copies.

Code: a bugfix session quotes the user's function, rewrites it with a fix and often puts
it together once more to re-check it, so three near-verbatim copies of 40 lines are healthy
there (without this rule the quote and the rewrite alone fire the accumulation). A shingle
whose last token is on a code line counts as copied, for both rules, only once it was seen
``code_min_seen`` (3) times before: code brings evidence from its fourth copy, prose from
its second. A code line is one inside a fence (a line starting with three backticks opens
or closes it) or an indented line, not a list item, under a line that was code or ended
with an opener (``:``, ``{``, ``(`` ...). The state is read from the block tokens (line
breaks carry the next line's indentation), so it follows the text, not the deltas.

Verbatim paragraphs repeated in a shifting order (A A B A C ...), numbered restarts
("787. Fill ... 788. Fill ...") and phrase-level loops all score the same way: the order of
recurrence does not matter, only that the text brings nothing new. A number that starts a
line is folded to ``#`` so a counter that keeps going does not look like new content;
other numbers are kept, so "Year 5: ... Year 6: ..." arithmetic still reads as progress.

Lists: a puzzle search that enumerates candidates ("1. A and B cross:3. Total:3. 2. A
returns:1. Total:4. ...") repeats its steps all the time, so most shingles of a new
candidate were seen in earlier ones, though the candidate as a whole is new. Lists whose
items differ in their numbers and names must not add up as copies, so a list's copied
shingles are held back until the list ends. A unit is a line, or consecutive lines that
start with a list marker (a digit or a bullet) taken together; a line that holds an
enumerator after a sentence end (". 2. A") is a list as well. At its end a list's held copies
count, as if they had counted all along, when it is prose in list form (fewer numbers and
one-letter names than half its words) or when the sequence of its numbers and names was
seen in an earlier list; else they are dropped. A loop that writes the same list again, with
the same numbers, counts as before; candidates that differ in a number or a name add
nothing. The same test is made for each item of a list of lines at the item's end: an item
that is prose ("1. Fill the 6-liter jug.") counts then, whatever the list turns out to be,
so steps restated in words count though the figures around them change (its copies from an
earlier block are counted in the block where the item ends). A unit longer than 512
shingles is prose: what it held counts. The sequences seen are kept in a bitset of 8,192
bits (1 KiB, allocated by the first list that needs it); a collision can only make a new
list count as a repeat.

The shingles and their counts are :class:`~detectors.shingles.ShingleTable`'s: a bounded
table of fingerprinted two-bit counters and a ring of the last ``history`` shingles (16 KiB
of table and 16 KiB of ring at the default 8192, allocated as the text grows; see
:mod:`detectors.shingles`). This module reads the lines, the code and the lists, and scores.

How a block is read: its tokens go through the line, code and list state one by one, and
their keys (the token, or ``#`` for a number that starts a line) wait in a batch. The table
counts the batch, and :meth:`RecurrenceAnalyzer._count` adds its copies to the block's or to
the held ones, at the block's end and whenever the state it was read under changes or its
copies must be known: a list is held back, a line of a held list starts, a line turns to
code or back.
"""

from __future__ import annotations

from dataclasses import dataclass
from zlib import crc32

from detectors.analyzer import Finding, excerpt
from detectors.base import Evidence
from detectors.blocks import Block
from detectors.shingles import TOP, ShingleTable

#: Blocks with fewer shingles than this (symbol runs) leave the evidence as it is.
_MIN_SHINGLES = 8
#: A unit longer than this (in shingles) is prose, not a list: what it held back counts.
_UNIT_MAX = 512
#: Bits of the set of number sequences seen (a bitset of 1 KiB).
_SIG_BITS = 13
#: Tokens after which "N ." inside a line is a list enumerator (". 2. A returns").
_ENDS = frozenset(".:;")
_DIGITS = frozenset("0123456789")
#: A line ending with one of these opens a block: indented lines after it may be code.
_OPENERS = frozenset(":{([=,\\")
#: First characters of list items: an indented list is prose, not code.
_BULLETS = frozenset("-*+>•·")
#: ``_BELOW[n]``: the counts under ``n``, deleted from a batch's counts to count the rest.
_BELOW = tuple(bytes(range(n)) for n in range(TOP + 2))


@dataclass(slots=True)
class _Lines:
    """Where the reading stands in the text, carried from block to block (see "Code")."""

    start: bool = True  # no text yet on this line (a number folds, backticks open fences)
    ticks: int = 0  # backticks so far at the start of this line
    fence: bool = False  # inside a fence
    code: bool = False  # this line is code
    prev_code: bool = False  # the last line with text was code ...
    opener: bool = False  # ... or ended with an opener
    indented: bool = False  # this line is indented
    last: str = ""  # the last token: a run of one token ("-----", "🌰🌰🌰") is one key


@dataclass(slots=True)
class _Unit:
    """The unit being read: a line, or a list of lines (see "Lists" in the module
    docstring). Positions count the channel's keys."""

    items: bool = False  # a list of lines (it started with a list item)
    held: bool = False  # a list: its copies are held back until it ends
    sig: int = 0  # the hash of its numbers and one-letter names, in order
    start: int = 0  # where it started
    nums: int = 0  # its numbers and one-letter names
    words: int = 0  # its words (two letters or more)
    num_at: int = -9  # where the last number was ...
    end_at: int = -9  # ... and the last sentence end (an enumerator in a line: ". 2 .")
    before_first: int = 0  # its held copies from earlier blocks (for the accumulation,
    before_again: int = 0  # for the window)
    # Where the current item of a list of lines began: the unit's numbers and words, and
    # its held copies (both rules, this block's and earlier ones) so far, then.
    item_nums: int = 0
    item_words: int = 0
    item_first: int = 0
    item_again: int = 0


@dataclass(slots=True)
class _Copies:
    """Copied shingles counted in one block: those seen often enough for the accumulation
    (``first``) and for the window (``again``), and the highest count among the latter."""

    first: int = 0
    again: int = 0
    top: int = 0


class RecurrenceAnalyzer:
    """Block analyzer for one channel; see the module docstring."""

    __slots__ = (
        "_code1",
        "_code2",
        "_drift",
        "_evidence",
        "_free",
        "_held",
        "_k",
        "_keys",
        "_lines",
        "_min_seen",
        "_score",
        "_shadow",
        "_sigs",
        "_sum_n",
        "_sum_rec",
        "_table",
        "_threshold",
        "_unit",
        "_win",
        "_window",
    )

    def __init__(
        self,
        shingle: int,
        history: int,
        min_seen: int,
        window_blocks: int,
        threshold: float,
        drift: float = 0.45,
        evidence: float = 2.0,
        code_min_seen: int = 3,
    ) -> None:
        for key, seen in (("recurrence_min_seen", min_seen),
                          ("recurrence_code_min_seen", code_min_seen)):
            if not 1 <= seen <= TOP:  # a count is at most ``TOP``
                raise ValueError(f"{key} must be in 1..{TOP}, got {seen}")
        self._table = ShingleTable(shingle, history)
        self._k = shingle
        self._keys = 0  # the channel's keys so far
        # Sightings a shingle needs to count for the accumulation and the window, in prose
        # (1 and ``min_seen``) and on a code line (which may come back once more).
        self._min_seen, self._code1 = min_seen, code_min_seen
        self._code2 = max(min_seen, code_min_seen)
        self._threshold = threshold
        self._drift = drift
        self._evidence = evidence
        # The accumulated evidence, and what it would be had the unit's held copies counted
        # (taken over when the list turns out to count).
        self._score = 0.0
        self._shadow = 0.0
        self._window = window_blocks
        # (recurring, shingles) of the last blocks: a list, as the window is a few blocks
        # (a deque's first block alone is 600 bytes per analyzer).
        self._win: list[tuple[int, int]] = []
        self._sum_n = 0
        self._sum_rec = 0
        self._lines = _Lines()
        self._unit = _Unit()
        # This block's copies that count, and the unit's held copies in this block (their
        # ``top`` is the unit's).
        self._free = _Copies()
        self._held = _Copies()
        # The number sequences of the lists so far, one bit each (allocated by the first).
        self._sigs = bytearray()

    @property
    def evidence(self) -> float:
        """The accumulated evidence so far (the CUSUM ``S`` of the module docstring)."""
        return self._score

    @property
    def window_score(self) -> float:
        """The window rule's current score (0 until the window is full)."""
        if len(self._win) < self._window or self._sum_n < 8 * self._window:
            return 0.0
        return self._sum_rec / self._sum_n

    def analyze(self, block: Block) -> Finding | None:
        """Count the block's shingles, then score the window and the accumulated evidence."""
        free = self._free
        free.first = free.again = free.top = 0
        before = self._keys
        self._table.reserve(len(block.toks))
        self._read(block.toks)
        unit = self._unit
        if unit.held and self._keys - unit.start >= _UNIT_MAX:  # prose, not a list
            self._end_unit(counts=True)
            unit.held = False
        # The block's shingles: its keys, those from the ``k``-th of the channel on.
        n = max(0, self._keys - max(before, self._k - 1))
        self._accumulate(n)
        rec = min(free.again, n)
        win = self._win
        win.append((rec, n))
        self._sum_rec += rec
        self._sum_n += n
        if len(win) > self._window:
            r0, n0 = win.pop(0)
            self._sum_rec -= r0
            self._sum_n -= n0
        top = free.top
        if self._score >= self._evidence:
            return Finding(
                f"copied text kept accumulating: {self._score:.2f} blocks' worth above "
                f"a drift of {self._drift:.2f} per block",
                Evidence(excerpt(block.text), 0, top + 1 if top else 2),
            )
        if len(win) < self._window or self._sum_n < 8 * self._window:
            return None
        score = self._sum_rec / self._sum_n
        if score < self._threshold:
            return None
        return Finding(
            f"{score:.0%} of the last {self._sum_n} shingles were seen {self._min_seen}+ "
            f"times before ({self._code2}+ in code)",
            Evidence(excerpt(block.text), 0, top + 1),
        )

    def _read(self, toks: list[str]) -> None:
        """Read the block's tokens: the line and code state, the list rule's numbers, names
        and words, and the units; count every key's shingle (``_count``) under the state
        it was read in."""
        keys: list[str] = []
        push = keys.append
        lines = self._lines
        ls, ticks, fence, code = lines.start, lines.ticks, lines.fence, lines.code
        prev_code, opener, indented, same = (
            lines.prev_code, lines.opener, lines.indented, lines.last
        )
        unit = self._unit
        held = unit.held
        n_seen = self._keys
        for tok in toks:
            c0 = tok[0]
            if c0 == "\n":  # a line break, with the indentation of the next line
                if not ls:  # the line that ends here had text: it sets the next one's context
                    prev_code = code
                    opener = same in _OPENERS
                ls = True
                ticks = 0
                indented = len(tok) > 2 or "\t" in tok
                continue
            key = tok
            if ls:
                if c0 == "`":
                    # Runs of three backticks at a line start open or close a fence.
                    ticks += 1
                    if ticks == 3:
                        fence = not fence
                        if not code:
                            self._count(keys, held, code)
                            code = True
                else:
                    ls = False
                    # A line that starts with a one-letter name ("A and B cross") is a
                    # step of a list, as a numbered one is ("I" is a pronoun).
                    item = (c0 in _BULLETS or c0.isdigit()
                            or (len(tok) == 1 and "A" <= c0 <= "Z" and c0 != "I"))
                    line_code = fence or (indented and (prev_code or opener) and not item)
                    if keys and (held or item or line_code != code):
                        self._count(keys, held, code)
                    code = line_code
                    held = self._line(item, n_seen)
                    if c0.isdigit() and tok.isdigit():
                        key = "#"
            if tok == same:
                continue
            same = tok
            # Numbers, one-letter names, enumerators and words, for the list rule ("Lists").
            if c0 >= "a":  # most tokens: a lower-case word (or any non-ASCII one)
                if held and len(tok) > 1:  # words matter in lists only
                    unit.words += 1
            elif c0 < "A":  # a number or punctuation (ASCII order)
                if c0 in _DIGITS:
                    if key is tok:  # not a folded list number
                        unit.sig = crc32(tok.encode(), unit.sig)
                        unit.num_at = n_seen
                        unit.nums += 1
                elif c0 in _ENDS:
                    # An enumerator inside the line (". 2. A"): a list.
                    if (c0 == "." and unit.num_at == n_seen - 1
                            and unit.end_at == n_seen - 2 and not held):
                        self._count(keys, held, code)
                        held = unit.held = True
                    unit.end_at = n_seen
            elif c0 <= "Z":  # a capitalised word, or a one-letter name
                if len(tok) == 1:
                    unit.sig = crc32(tok.encode(), unit.sig)
                    unit.num_at = n_seen
                    unit.nums += 1
                    if unit.end_at == n_seen - 1 and c0 != "I" and not held:
                        # A sentence starts with a one-letter name (". A and B"): a list.
                        self._count(keys, held, code)
                        held = unit.held = True
                elif held:
                    unit.words += 1
            push(key)
            n_seen += 1
        self._count(keys, held, code)
        self._keys = n_seen
        lines.start, lines.ticks, lines.fence, lines.code = ls, ticks, fence, code
        lines.prev_code, lines.opener, lines.indented, lines.last = (
            prev_code, opener, indented, same
        )

    def _count(self, keys: list[str], held: bool, code: bool) -> None:
        """Count the shingles that end at ``keys`` (and empty it): a shingle is copied for
        the accumulation once seen once before (on a code line: ``code_min_seen`` times),
        for the window once seen ``min_seen`` times (code: the larger of both). The copies
        go to the block's, or to the unit's held ones while it is held back."""
        if not keys:
            return
        counts = self._table.see(keys)
        keys.clear()
        first_at, again_at = (self._code1, self._code2) if code else (1, self._min_seen)
        first = len(counts.translate(None, _BELOW[first_at]))
        if not first:
            return
        copies = self._held if held else self._free
        copies.first += first
        again = len(counts.translate(None, _BELOW[again_at]))
        if again:
            copies.again += again
            copies.top = max(copies.top, max(counts))  # noqa: PLW3301 (a bytearray, not items)

    def _line(self, item: bool, at: int) -> bool:
        """A line starts at key ``at`` (its first token is a list item or not): release the
        list item that ends here if it is prose, and end the unit unless this line goes on
        with its list. Return whether the unit is now held back. Every key before ``at`` is
        counted."""
        unit = self._unit
        held = self._held
        if (
            unit.held
            and unit.items
            and 2 * (unit.nums - unit.item_nums) < unit.words - unit.item_words
        ):
            # The item before this line is prose (fewer numbers and names than half its
            # words): its held copies count now, whatever the list.
            first = held.first + unit.before_first - unit.item_first
            again = held.again + unit.before_again - unit.item_again
            if first:
                free = self._free
                free.first += first
                free.again += again
                held.first -= first
                held.again -= again
                free.top = max(free.top, held.top)
        unit.item_nums, unit.item_words = unit.nums, unit.words
        unit.item_first = held.first + unit.before_first
        unit.item_again = held.again + unit.before_again
        if item and unit.items:  # the list of lines goes on
            return unit.held
        if unit.held:
            # A list counts unless it is made of numbers and names (at least one for two
            # words) and those are new, in that order.
            self._end_unit(counts=2 * unit.nums < unit.words or self._seen_sig(unit.sig))
        unit.items = unit.held = item
        unit.sig = unit.nums = unit.words = 0
        unit.start = at
        unit.item_nums = unit.item_words = unit.item_first = unit.item_again = 0
        return item

    def _end_unit(self, *, counts: bool) -> None:
        """The held-back unit ends: its copies count, as if they had counted all along, or
        they are dropped."""
        held = self._held
        unit = self._unit
        if counts:
            free = self._free
            free.first += held.first
            free.again += held.again + unit.before_again
            self._score = max(self._score, self._shadow)
            free.top = max(free.top, held.top)
        else:
            self._shadow = self._score
        held.first = held.again = held.top = 0
        unit.before_first = unit.before_again = 0

    def _accumulate(self, n: int) -> None:
        """Add the block's ``n`` shingles to the accumulated evidence (and to what it would
        be had the held copies counted); carry the held copies to the next block."""
        free, held, unit = self._free, self._held, self._unit
        if n >= _MIN_SHINGLES:
            if unit.held:
                self._shadow = max(0.0, self._shadow + (free.first + held.first) / n - self._drift)
            self._score = max(0.0, self._score + free.first / n - self._drift)
            if not unit.held:
                self._shadow = self._score
        if unit.held:  # the window counts this block's held copies if the unit is released
            unit.before_again += held.again
            unit.before_first += held.first
            held.first = held.again = 0

    def _seen_sig(self, sig: int) -> bool:
        """Whether a list with this number sequence came before; remember it."""
        sigs = self._sigs
        if not sigs:
            sigs = self._sigs = bytearray(1 << (_SIG_BITS - 3))
        bit = sig & ((1 << _SIG_BITS) - 1)
        byte, mask = bit >> 3, 1 << (bit & 7)
        seen = bool(sigs[byte] & mask)
        sigs[byte] |= mask
        return seen
