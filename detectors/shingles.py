"""Shingles: how often each of the recent k-grams of a token stream was seen before.

A *shingle* is ``k`` consecutive keys of a stream (the keys are pseudo-tokens; case does
not matter). :class:`ShingleTable` takes a stream's keys in batches and answers, for every
shingle that ends at one of them, how many times it was seen among the last ``history``
shingles before it (0 to :data:`TOP`, 3). The first ``k - 1`` keys of a stream end no shingle.

The table has up to ``2 * history`` one-byte slots, each a six-bit fingerprint over a
two-bit counter, probed in pairs (slot, slot ^ 1): a shingle is *seen* only when its
fingerprint matches, so most collisions do not fake recurrence (a full pair drops the
shingle, which can only under-count). A counter stops at 3, the most its reader asks (a
shingle is copied when seen once before in prose, twice for the window rule, three times
on a code line): a sighting past that is not counted, and its ring entry says so, so the
counter always holds exactly its counted sightings still in the window. A shingle seen more
often within the history (a loop long past its verdict) is under-counted as its counted
copies expire, down to 2 while the loop goes on (each new copy is counted again once one
has expired). A shingle's slot is the top bits of its hash, as many as the table is large,
and its fingerprint the 6 bits below those of the full-size table, so a table that grows
keeps every fingerprint. A ring remembers where each of the last ``history`` shingles went,
so the oldest is forgotten once the ring is full (while the table grows it keeps each
shingle's full-size slot and fingerprint, to insert it again).

Memory grows with the text. The table is allocated by the first :meth:`~ShingleTable.reserve`,
sized to at least eight slots per shingle the ring will hold after the batch it reserves for
(4,096 slots at least: 512 shingles, about 2,000 characters, so a short stream never
re-inserts), and doubles, re-inserting the ring's shingles in their order, until it has its
full ``2 * history`` slots (16 KiB at the default 8192) once the ring holds more than
``history / 8`` shingles. Until then it holds at most one ring entry per eight slots, a
quarter of the full-size table's load once the ring is full, so it drops fewer shingles
than that table does. The ring takes 4 bytes per shingle while the table grows, then 2,
allocated by powers of two of entries (one allocation each, not a realloc per few
appends) up to ``history`` of them (16 KiB), then wraps. A stream idle after 400 tokens (about 370
shingles) holds 4 KiB of table, not 16.

Why six bits and three: the fingerprints and counters are most of a stream's memory. A
shingle that is new is taken for a copy when one of its pair's two slots holds another
shingle with its fingerprint: with the full-size table at most half full, at most one such
false sighting in 64 new shingles (one in 256 with eight bits), against the ``drift`` of
0.45 each block's share of copies must beat to add evidence. Counts above 3 told the
detector nothing it reads.
"""

from __future__ import annotations

from array import array
from zlib import crc32

import numpy as np
import numpy.typing as npt

_BASE = 0x100000001B3
_MIX = 0x9E3779B97F4A7C15
#: Ring entry of a shingle that was not counted (the table had no room for it, or its
#: counter was at :data:`TOP`): nothing to forget when it expires.
_DROPPED = 0xFFFF
#: The same, while the table grows (the ring's entries are wider then).
_GONE = 0xFFFFFFFF
#: The smallest table, in bits (4,096 slots, 4 KiB). Every doubling re-inserts the ring's
#: shingles one by one; from 1,024 slots a 300-token stream spent about a tenth of its
#: watching on two of them.
_MIN_BITS = 12
#: A fingerprint's width in bits; a slot's byte is ``fingerprint << 2 | counter``.
_FP_BITS = 6
_FP_MASK = (1 << _FP_BITS) - 1
#: A counter's largest value (two bits).
TOP = 3
#: Joins a batch of keys so that one ``lower``, ``encode`` and ``split`` serve them all,
#: and ``map(crc32, ...)`` hashes them without a Python step per key. No key holds it (the
#: blocker's tokens hold no carriage return), and it is neither cased nor case-ignorable,
#: so the joined text lowers exactly as each key on its own would (a final sigma stays final).
_SEP = "\r"
_SEP_BYTES = b"\r"


def _place(table: bytearray, slot: int, want: int) -> tuple[int, int]:
    """Count a sighting of the shingle whose home is ``slot`` and whose byte with a zero
    counter is ``want``: return where it went and how many times it was seen before (0 for
    a new one). It is seen in the pair's slot that holds its fingerprint with a counter;
    a new one takes its home if free, else the pair's other slot if free; else it is not
    counted (a full pair) and the slot is ``_DROPPED``, as is one whose counter was at
    :data:`TOP`. A free slot's byte is 0 (expiry clears it)."""
    b = table[slot]
    if not 0 < b - want <= TOP:
        alt = slot ^ 1
        b2 = table[alt]
        if 0 < b2 - want <= TOP:
            slot, b = alt, b2
        elif not b:
            table[slot] = want + 1
            return slot, 0
        elif not b2:
            table[alt] = want + 1
            return alt, 0
        else:
            return _DROPPED, 0
    c = b - want
    if c == TOP:
        return _DROPPED, c
    table[slot] = b + 1
    return slot, c


_WEIGHTS: dict[int, npt.NDArray[np.uint64]] = {}


def _weights(k: int) -> npt.NDArray[np.uint64]:
    """The correlation weights of a ``k``-key shingle's mixed hash: ``_MIX * _BASE**(k-1-t)``
    modulo 2**64 for its ``t``-th key, oldest first (made once per ``k``)."""
    found = _WEIGHTS.get(k)
    if found is None:
        found = _WEIGHTS[k] = np.array(
            [_MIX * pow(_BASE, k - 1 - t, 1 << 64) % (1 << 64) for t in range(k)], dtype=np.uint64
        )
    return found


class ShingleTable:
    """The counted shingles of one stream; see the module docstring."""

    __slots__ = (
        "_bits",
        "_filled",
        "_k",
        "_keys",
        "_last",
        "_maxbits",
        "_ring",
        "_rpos",
        "_sized",
        "_table",
    )

    def __init__(self, shingle: int, history: int) -> None:
        if history & (history - 1) or not 256 <= history <= 16384:
            raise ValueError("recurrence_history must be a power of two in 256..16384")
        self._k = shingle
        self._maxbits = (history * 2).bit_length() - 1
        # The table is allocated by the first ``reserve`` (a stream that ends, or sits idle,
        # before it never pays for it) and grows with the ring (``_grow``); ``_bits`` is its
        # current size in bits. A slot's byte is its fingerprint over its counter, 0 if free.
        self._bits = 0
        self._table = bytearray()
        # While the table grows, a ring entry is the shingle's slot in the full-size table
        # and its fingerprint, ``slot << 6 | fp`` (what ``_grow`` needs to insert it again),
        # or ``_GONE``; once the table is full-size, the ring becomes two bytes an entry,
        # the slot whose counter the shingle raised (what expiry lowers) or ``_DROPPED``.
        self._ring = array("I")
        self._rpos = 0
        self._sized = False  # the table and the ring have their full sizes: nothing to reserve
        self._filled = 0  # ring entries so far, counted while the table grows
        self._keys = 0  # keys taken so far (the first ``k - 1`` end no shingle)
        # The hashes of the last ``k - 1`` keys, oldest first (zeros before the stream's
        # first): the shingles that end at the next keys start there.
        self._last = [0] * (shingle - 1)

    def reserve(self, keys: int) -> None:
        """Make room before a batch of up to ``keys`` more keys: allocate or grow the table
        for the shingles the ring will hold after them, then the ring (see the module
        docstring)."""
        if self._sized:
            return
        if self._bits < self._maxbits:
            self._grow(self._filled + keys)
            if self._bits < self._maxbits:
                return
        ring = self._ring
        hist = 1 << (self._maxbits - 1)
        if len(ring) < min(hist, self._rpos + keys):
            # A power of two of entries, at most ``history``, in one allocation each: grown
            # by append, the array was realloc'd about 30 times on its way to 16 KiB, and
            # with streams interleaved each move left a freed copy in the heap that RSS kept.
            size = min(hist, 1 << (self._rpos + keys - 1).bit_length())
            grown = array("H", (_DROPPED,)) * size
            grown[: len(ring)] = ring
            self._ring = grown
            self._sized = size == hist

    def _grow(self, shingles: int) -> None:
        """Size the table to at least eight slots per shingle for ``shingles`` ring entries
        (at most the full size) and insert the ring's shingles again, oldest first, exactly
        as they were first inserted; a shingle that finds its pair full, or its counter at
        :data:`TOP`, is not counted."""
        bits = min(self._maxbits, max(_MIN_BITS, (shingles * 8 - 1).bit_length()))
        if bits <= self._bits:
            return
        less = self._maxbits - bits
        table = bytearray(1 << bits)
        ring = self._ring
        # Once full-size, two bytes an entry: a slot, or ``_DROPPED``; written in place
        # (an iterator or a generator over the old ring would hold one int object per
        # entry in the compiled build: 40 KiB at once).
        slots = array("H", bytes(2 * len(ring))) if not less else ring
        # The table is full-size long before the ring wraps (at ``history / 8`` entries
        # against ``history``): the entries here are in insertion order from index 0.
        for i in range(len(ring)):
            entry = ring[i]
            if entry == _GONE:
                slots[i] = _DROPPED if not less else _GONE
                continue
            slot, _ = _place(table, entry >> (_FP_BITS + less), (entry & _FP_MASK) << 2)
            if not less:
                slots[i] = slot
            elif slot == _DROPPED:
                slots[i] = _GONE
        self._table, self._bits, self._ring = table, bits, slots
        if not less:
            # ``reserve`` sizes the two-byte ring from here on: the entries not written yet
            # hold ``_DROPPED`` (nothing to forget), so the ring fills as it wraps, in one path.
            self._rpos = len(ring)

    def see(self, keys: list[str]) -> bytearray:
        """Take the next ``keys`` of the stream and count the shingles that end at them;
        return how many times each one seen before was seen (1 to :data:`TOP`), in order:
        the new ones (most) are left out. The table must have room for them
        (:meth:`reserve`)."""
        counts = bytearray()
        if not keys:
            return counts
        hashes = [*map(crc32, _SEP.join(keys).lower().encode().split(_SEP_BYTES))]
        k = self._k
        n = len(hashes)
        # The hash of the last ``k`` keys is ``sum(h[i - t] * _BASE**t for t < k)`` modulo
        # 2**64, mixed by a multiplication by ``_MIX``: one correlation of the keys with
        # the weights ``_MIX * _BASE**t`` (numpy's uint64 wraps as that modulo does) serves
        # the whole batch in one call, where Python ints (compiled or not) go past 62 bits
        # into arbitrary-precision arithmetic on every key. ``window`` holds the ``k - 1``
        # keys before the batch (zeros before the stream's first), then the batch.
        window = self._last + hashes
        self._last = window[n:]
        rolling = np.correlate(np.array(window, dtype=np.uint64), _weights(k), "valid")
        warm = k - 1 - self._keys
        self._keys += n
        if warm > 0:  # the stream's first keys: no shingle ends there yet
            rolling = rolling[warm:]
        fulls: list[int] = (rolling >> np.uint64(64 - self._maxbits - _FP_BITS)).tolist()
        table = self._table
        ring = self._ring
        wrap = (1 << (self._maxbits - 1)) - 1  # ``history`` is a power of two
        less = self._maxbits - self._bits
        slot_shift = _FP_BITS + less  # the slot in the table as large as it is now
        rpos = self._rpos
        filled = self._filled
        dropped, top, fp_mask = _DROPPED, TOP, _FP_MASK
        append = counts.append
        for full in fulls:
            slot = full >> slot_shift
            want = (full & fp_mask) << 2
            b = table[slot]
            if not b and not table[slot ^ 1]:
                # Both slots of the pair are free (most pairs, in a table with room): a new
                # shingle takes its home. What ``_place`` would do, in the fewest steps.
                table[slot] = want + 1
            elif 0 < b - want < top:
                # Seen before in its home, below the top: the most common sighting.
                table[slot] = b + 1
                append(b - want)
            else:
                # ``_place`` for the rest: the pair's other slot, a full pair or a counter
                # at the top (a call per shingle here cost 10 % of the analyzer's time).
                slot, c = _place(table, slot, want)
                if c:
                    append(c)
            if less:  # the table still grows: the ring keeps full-size slots and fps
                filled += 1
                ring.append(full if slot != dropped else _GONE)
            else:  # the ring wraps at ``history`` entries (see ``reserve``)
                o = ring[rpos]
                ring[rpos] = slot
                rpos = (rpos + 1) & wrap
                if o != dropped:  # forget the oldest counted sighting
                    b = table[o] - 1
                    table[o] = b if b & 3 else 0
        self._rpos, self._filled = rpos, filled
        return counts
