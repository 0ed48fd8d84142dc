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

from detectors.shinglecount import DROPPED as _DROPPED
from detectors.shinglecount import FP_BITS as _FP_BITS
from detectors.shinglecount import FP_MASK as _FP_MASK
from detectors.shinglecount import GONE as _GONE
from detectors.shinglecount import SEP as _SEP
from detectors.shinglecount import TOP, count, place

__all__ = ["TOP", "ShingleTable"]

#: The smallest table, in bits (4,096 slots, 4 KiB). Every doubling re-inserts the ring's
#: shingles one by one; from 1,024 slots a 300-token stream spent about a tenth of its
#: watching on two of them.
_MIN_BITS = 12


class ShingleTable:
    """The counted shingles of one stream; see the module docstring."""

    __slots__ = (
        "_bits",
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
            self._grow(len(self._ring) + keys)  # one wide ring entry a shingle so far
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
            slot, _ = place(table, entry >> (_FP_BITS + less), (entry & _FP_MASK) << 2)
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
        (:meth:`reserve`). The work is :func:`detectors.shinglecount.count`'s."""
        if not keys:
            return bytearray()
        n = len(keys)
        warm = self._k - 1 - self._keys  # the stream's first keys end no shingle
        self._keys += n
        bits = self._bits
        if bits < self._maxbits:  # the table still grows: the ring takes a wide entry each
            pos = len(self._ring)
            self._ring.frombytes(bytes(4 * max(0, n - max(0, warm))))
        else:
            pos = self._rpos
        counts, pos = count(self._table, self._ring, self._last,
                            _SEP.join(keys).lower().encode(), warm, self._maxbits, bits, pos)
        if bits == self._maxbits:
            self._rpos = pos
        return counts
