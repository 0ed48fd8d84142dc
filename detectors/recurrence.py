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

The table has up to ``2 * history`` four-bit counters, each with a one-byte fingerprint,
probed in pairs (slot, slot ^ 1) whose two counters share a byte: a shingle is *seen* only
when its fingerprint matches, so collisions do not fake recurrence (a full pair drops the
shingle, which can only under-count). A counter stops at 15: a shingle seen more often
within the history (a loop long past its verdict) is under-counted as its copies expire.
A shingle's slot is the top bits of its hash, as many as the table is large, and its
fingerprint the 8 bits below those of the full-size table, so a table that grows keeps
every fingerprint. A ring remembers where each of the last ``history`` shingles went, so
the oldest is forgotten once the ring is full (while the table grows it keeps each
shingle's full-size slot and fingerprint, to insert it again).

Memory grows with the text. The table is allocated by the channel's first 256-character
block, sized to at least eight slots per shingle the ring will hold after that block
(4,096 slots at least: 512 shingles, about 2,000 characters, so a short stream never
re-inserts), and doubles, re-inserting the ring's shingles in their order,
until it has its full ``2 * history`` slots (8 + 16 KiB at the default 8192) once the
ring holds more than ``history / 8`` shingles. Until then it holds at most one ring entry
per eight slots, a quarter of the full-size table's load once the ring is full, so it
drops fewer shingles than that table does. The ring takes 2 bytes per shingle (4 while
the table grows) up to ``history`` of them (16 KiB), then wraps. A stream idle after 400
tokens (about 370 shingles) holds 6 KiB of table, not 24.
"""

from __future__ import annotations

from array import array
from zlib import crc32

from detectors.analyzer import Finding, excerpt
from detectors.base import Evidence
from detectors.blocks import Block

_MASK = (1 << 64) - 1
_BASE = 0x100000001B3
_MIX = 0x9E3779B97F4A7C15
#: Ring entry of a shingle the table had no room for (nothing to forget when it expires).
_DROPPED = 0xFFFF
#: The same, while the table grows (the ring's entries are wider then).
_GONE = 0xFFFFFFFF
#: The smallest table, in bits (4,096 slots, 6 KiB with the fingerprints). Every doubling
#: re-inserts the ring's shingles one by one; from 1,024 slots a 300-token stream spent
#: about a tenth of its watching on two of them.
_MIN_BITS = 12
#: A counter's largest value (four bits).
_TOP = 15
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


def _other_slot(pairs: bytearray, fps: bytearray, slot: int, fp: int) -> int:
    """Where a shingle goes whose own ``slot`` holds another fingerprint or nothing: the
    pair's other slot if that holds ``fp``; else the first free slot of the pair, whose
    fingerprint becomes ``fp``; else ``_DROPPED`` (the pair is full). A pair's byte holds
    the even slot's counter in its low four bits, the odd slot's in its high four."""
    b = pairs[slot >> 1]
    alt = slot ^ 1
    if slot & 1:
        c, c2 = b >> 4, b & 15
    else:
        c, c2 = b & 15, b >> 4
    if c2 and fps[alt] == fp:
        return alt
    if not c:
        fps[slot] = fp
        return slot
    if not c2:
        fps[alt] = fp
        return alt
    return _DROPPED


class RecurrenceAnalyzer:
    """Block analyzer for one channel; see the module docstring."""

    __slots__ = (
        "_bits",
        "_code",
        "_code1",
        "_code2",
        "_drift",
        "_evidence",
        "_fence",
        "_fps",
        "_held",
        "_hist",
        "_indented",
        "_items",
        "_k",
        "_last",
        "_li",
        "_ls",
        "_mark",
        "_maxbits",
        "_min_seen",
        "_n",
        "_opener",
        "_pairs",
        "_pow",
        "_prev_code",
        "_ring",
        "_rolling",
        "_rpos",
        "_same",
        "_score",
        "_seen_tokens",
        "_sigs",
        "_sum_n",
        "_sum_rec",
        "_threshold",
        "_ticks",
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
        if history & (history - 1) or not 256 <= history <= 16384:
            raise ValueError("recurrence_history must be a power of two in 256..16384")
        self._k = shingle
        self._hist = history
        self._maxbits = (history * 2).bit_length() - 1
        # The table is allocated by the first block that is analyzed (a stream that ends,
        # or sits idle, before 256 characters of this channel never pays for it) and grows
        # with the ring (``_grow``); ``_bits`` is its current size in bits.
        self._bits = 0
        self._pairs = bytearray()  # a pair's two counters, low nibble for the even slot
        self._fps = bytearray()
        # While the table grows, a ring entry is the shingle's slot in the full-size table
        # and its fingerprint, ``slot << 8 | fp`` (what ``_grow`` needs to insert it again),
        # or ``_GONE``; once the table is full-size, the ring becomes two bytes an entry,
        # the slot the shingle went to (what expiry needs) or ``_DROPPED``.
        self._ring = array("I")
        self._rpos = 0
        self._n = 0
        self._min_seen = min_seen
        self._threshold = threshold
        self._drift = drift
        self._evidence = evidence
        self._score = 0.0
        self._window = window_blocks
        # (recurring, shingles) of the last blocks: a list, as the window is a few blocks
        # (a deque's first block alone is 600 bytes per analyzer).
        self._win: list[tuple[int, int]] = []
        self._sum_n = 0
        self._sum_rec = 0
        self._last = [0] * shingle
        self._li = 0
        self._rolling = 0
        self._pow = pow(_BASE, shingle, 1 << 64)
        self._seen_tokens = 0
        # Earlier sightings a shingle on a code line needs to count for the accumulation
        # and for the window (code may come back once more than prose before it counts).
        self._code1 = code_min_seen
        self._code2 = max(min_seen, code_min_seen)
        # Line state carried across blocks: at a line start (to fold list numbers and read
        # fences), backticks so far on this line, inside a fence, the current line is code,
        # the previous line with text was code / ended with an opener, this line indented.
        self._ls = True
        self._ticks = 0
        self._fence = False
        self._code = False
        self._prev_code = False
        self._opener = False
        self._indented = False
        self._same = ""
        # The unit being read (see "Lists" in the module docstring): it is a list of lines,
        # it is a list (its copies are held back), the hash of its numbers and names, the
        # token count where it started, its held copies in this block (for the accumulation,
        # for the window, their top count), where the last number and the last sentence end
        # were (an enumerator inside a line is ". 2 .").
        self._unit = (False, False, 0, 0, 0, 0, 0, -9, -9)
        # The unit's numbers and one-letter names, and its words (two letters or more).
        self._items = (0, 0)
        # Where the current item of a list of lines began: the unit's numbers and words, and
        # its held copies (both rules) so far, then.
        self._mark = (0, 0, 0, 0)
        # What the evidence would be had the held copies counted, and the held copies of
        # earlier blocks for the window rule.
        self._held = (0.0, 0, 0)
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

    def _grow(self, shingles: int) -> None:
        """Size the table to at least eight slots per shingle for ``shingles`` ring entries
        (at most the full size) and insert the ring's shingles again, oldest first, exactly
        as they were first inserted; a shingle that finds its pair full is dropped."""
        bits = min(self._maxbits, max(_MIN_BITS, (shingles * 8 - 1).bit_length()))
        if bits <= self._bits:
            return
        less = self._maxbits - bits
        pairs = bytearray(1 << (bits - 1))
        fps = bytearray(1 << bits)
        ring = self._ring
        # The table is full-size long before the ring wraps (at ``history / 8`` entries
        # against ``history``): the entries here are in insertion order from index 0.
        for i, entry in enumerate(ring):
            if entry == _GONE:
                continue
            fp = entry & 0xFF
            slot = entry >> (8 + less)
            b = pairs[slot >> 1]
            c = (b >> 4) if slot & 1 else (b & 15)
            if not c or fps[slot] != fp:
                slot = _other_slot(pairs, fps, slot, fp)
                if slot == _DROPPED:
                    ring[i] = _GONE
                    continue
                c = (b >> 4) if slot & 1 else (b & 15)
            if c < _TOP:
                pairs[slot >> 1] = b + (16 if slot & 1 else 1)
            if not less:
                ring[i] = slot
        self._pairs, self._fps, self._bits = pairs, fps, bits
        if not less:
            # Two bytes an entry from now on: a slot, or ``_DROPPED`` where it was ``_GONE``.
            self._ring = array("H", (_DROPPED if e == _GONE else e for e in ring))

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

    def analyze(self, block: Block) -> Finding | None:
        """Score the block's shingles, then the window and the accumulated evidence."""
        if self._bits < self._maxbits:
            self._grow(self._n + len(block.toks))
        pairs = self._pairs
        fps = self._fps
        ring = self._ring
        last = self._last
        k = self._k
        hist = self._hist
        wrap = hist - 1
        min_seen = self._min_seen
        shift = 64 - self._maxbits
        fshift = shift - 8
        less = self._maxbits - self._bits
        sshift = shift + less  # the slot in the table as large as it is now
        rolling = self._rolling
        li = self._li
        rpos = self._rpos
        n_seen = seen_before = self._seen_tokens
        pw = self._pow
        filled = self._n
        base, mask, mix, dropped, ctop = _BASE, _MASK, _MIX, _DROPPED, _TOP
        top = 0
        rec = rec1 = 0
        u_items, held, u_sig, u_from, p_rec1, p_rec, p_top, num_at, end_at = self._unit
        u_nums, u_words = self._items
        m_nums, m_words, m_rec1, m_rec = self._mark
        # The accumulated evidence, and what it would be had the unit's held copies counted
        # (taken over when the list turns out to count).
        score = self._score
        shadow, p_rec_prev, p_rec1_prev = self._held
        # Code state, by position in the token stream (see "Code" in the module docstring).
        ls, ticks, fence = self._ls, self._ticks, self._fence
        code, prev_code = self._code, self._prev_code
        opener, indented = self._opener, self._indented
        code1, code2 = self._code1, self._code2
        same = self._same
        for tok in block.toks:
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
                        code = True
                else:
                    ls = False
                    item = c0 in _BULLETS or c0.isdigit()
                    code = fence or (indented and (prev_code or opener) and not item)
                    if c0.isdigit() and tok.isdigit():
                        key = "#"
                    if held and u_items and 2 * (u_nums - m_nums) < u_words - m_words:
                        # The item before this line is prose (fewer numbers and names than
                        # half its words): its held copies count now, whatever the list.
                        d1 = p_rec1 + p_rec1_prev - m_rec1
                        d = p_rec + p_rec_prev - m_rec
                        if d1:
                            rec1 += d1
                            rec += d
                            p_rec1 -= d1
                            p_rec -= d
                            top = max(top, p_top)
                    m_nums, m_words = u_nums, u_words
                    m_rec1, m_rec = p_rec1 + p_rec1_prev, p_rec + p_rec_prev
                    if not (item and u_items):
                        # A new unit: this line, or a list of lines starting with this item.
                        if held:
                            # A list counts unless it is made of numbers and names (at
                            # least one for two words) and those are new, in that order.
                            if 2 * u_nums < u_words or self._seen_sig(u_sig):
                                rec1 += p_rec1
                                rec += p_rec + p_rec_prev
                                score = max(score, shadow)
                                top = max(top, p_top)
                            else:
                                shadow = score
                            p_rec1 = p_rec = p_top = p_rec_prev = p_rec1_prev = 0
                        u_items = held = item
                        u_sig = u_nums = u_words = 0
                        u_from = n_seen
                        m_nums = m_words = m_rec1 = m_rec = 0
            # A run of one token ("-----", "🌰🌰🌰") is one shingle unit, as in BPE.
            if tok == same:
                continue
            same = tok
            # Numbers, one-letter names, enumerators and words, for the list rule ("Lists").
            if c0 >= "a":  # most tokens: a lower-case word (or any non-ASCII one)
                if held and len(tok) > 1:  # words matter in lists only
                    u_words += 1
            elif c0 < "A":  # a number or punctuation (ASCII order)
                if c0 in _DIGITS:
                    if key is tok:  # not a folded list number
                        u_sig = crc32(tok.encode(), u_sig)
                        num_at = n_seen
                        u_nums += 1
                elif c0 in _ENDS:
                    if num_at == n_seen - 1 and end_at == n_seen - 2 and c0 == ".":
                        held = True  # an enumerator inside the line (". 2. A"): a list
                    end_at = n_seen
            elif c0 <= "Z":  # a capitalised word, or a one-letter name
                if len(tok) == 1:
                    u_sig = crc32(tok.encode(), u_sig)
                    num_at = n_seen
                    u_nums += 1
                elif held:
                    u_words += 1
            h = crc32(key.lower().encode())
            old = last[li]
            last[li] = h
            li += 1
            if li == k:
                li = 0
            rolling = (rolling * base + h - old * pw) & mask
            n_seen += 1
            if n_seen < k:
                continue
            mixed = (rolling * mix) & mask
            slot = mixed >> sshift
            fp = (mixed >> fshift) & 0xFF
            pi = slot >> 1
            b = pairs[pi]
            if not b:
                # Both slots of the pair are free (most pairs, in a table with room): a new
                # shingle takes its own slot. What the general test below would do, in the
                # fewest steps.
                fps[slot] = fp
                pairs[pi] = 16 if slot & 1 else 1
                c = 0
            else:
                c = (b >> 4) if slot & 1 else (b & 15)
                if not c or fps[slot] != fp:
                    # ``_other_slot``, inlined: a call here costs 10 % of the analyzer's time.
                    alt = slot ^ 1
                    c2 = (b >> 4) if alt & 1 else (b & 15)
                    if c2 and fps[alt] == fp:
                        slot, c = alt, c2
                    elif not c:
                        fps[slot] = fp
                    elif not c2:
                        slot, c = alt, 0
                        fps[alt] = fp
                    else:
                        slot, c = dropped, 0
                # Count this sighting (the slot stays in the pair: ``pi`` and ``b`` hold).
                if slot != dropped and c < ctop:
                    pairs[pi] = b + (16 if slot & 1 else 1)
            if not c:
                pass
            elif held:  # a list: held back until it is known to count
                if code:
                    if c >= code1:
                        p_rec1 += 1
                    if c >= code2:
                        p_rec += 1
                        p_top = max(p_top, c)
                else:
                    p_rec1 += 1
                    if c >= min_seen:
                        p_rec += 1
                        p_top = max(p_top, c)
            elif code:
                if c >= code1:
                    rec1 += 1
                if c >= code2:
                    rec += 1
                    top = max(top, c)
            else:
                rec1 += 1
                if c >= min_seen:
                    rec += 1
                    top = max(top, c)
            if filled >= hist:  # the table is full-size (see ``_grow``)
                o = ring[rpos]
                if o != dropped:
                    b = pairs[o >> 1]
                    if o & 1:
                        if b >> 4:
                            pairs[o >> 1] = b - 16
                    elif b & 15:
                        pairs[o >> 1] = b - 1
                ring[rpos] = slot
                rpos = (rpos + 1) & wrap  # ``history`` is a power of two
            else:  # the ring grows to ``history`` entries, then wraps
                filled += 1
                if not less:
                    ring.append(slot)
                elif slot != dropped:  # the table still grows: its full-size slot and fp
                    ring.append(mixed >> fshift)
                else:
                    ring.append(_GONE)
        if held and n_seen - u_from >= _UNIT_MAX:  # prose, not a list: its copies count
            rec1 += p_rec1
            rec += p_rec + p_rec_prev
            score = max(score, shadow)
            top = max(top, p_top)
            held = False
            p_rec1 = p_rec = p_top = p_rec_prev = p_rec1_prev = 0
        n = max(0, n_seen - max(seen_before, k - 1))
        if n >= _MIN_SHINGLES:
            if held:
                shadow = max(0.0, shadow + (rec1 + p_rec1) / n - self._drift)
            score = max(0.0, score + rec1 / n - self._drift)
            if not held:
                shadow = score
        if held:  # the window counts this block's held copies if the unit is released
            p_rec_prev += p_rec
            p_rec1_prev += p_rec1
            p_rec1 = p_rec = 0
        self._score = score
        self._held = (shadow, p_rec_prev, p_rec1_prev)
        self._mark = (m_nums, m_words, m_rec1, m_rec)
        self._unit = (u_items, held, u_sig, u_from, p_rec1, p_rec, p_top, num_at, end_at)
        self._items = (u_nums, u_words)
        self._rolling, self._li, self._rpos, self._seen_tokens = rolling, li, rpos, n_seen
        # The block's shingles: its tokens that reached the table, those counted from the
        # ``k``-th token of the channel on (no counter in the loop).
        n = max(0, n_seen - max(seen_before, k - 1))
        self._n = filled
        self._ls, self._ticks, self._fence = ls, ticks, fence
        self._code, self._prev_code = code, prev_code
        self._opener, self._indented = opener, indented
        self._same = same
        rec = min(rec, n)
        win = self._win
        win.append((rec, n))
        self._sum_rec += rec
        self._sum_n += n
        if len(win) > self._window:
            r0, n0 = win.pop(0)
            self._sum_rec -= r0
            self._sum_n -= n0
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
            f"{score:.0%} of the last {self._sum_n} shingles were seen {min_seen}+ times "
            f"before ({self._code2}+ in code)",
            Evidence(excerpt(block.text), 0, top + 1),
        )
