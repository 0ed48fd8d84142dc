"""Shingles: how often each of the recent k-grams of a token stream was seen before.

A *shingle* is ``k`` consecutive keys of a stream (the keys are pseudo-tokens; case does
not matter). :class:`ShingleTable` takes a stream's keys in batches and answers, for every
shingle that ends at one of them, how many times it was seen among the last ``history``
shingles before it (0 to 15). The first ``k - 1`` keys of a stream end no shingle.

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

Memory grows with the text. The table is allocated by the first :meth:`~ShingleTable.reserve`,
sized to at least eight slots per shingle the ring will hold after the batch it reserves for
(4,096 slots at least: 512 shingles, about 2,000 characters, so a short stream never
re-inserts), and doubles, re-inserting the ring's shingles in their order, until it has its
full ``2 * history`` slots (8 + 16 KiB at the default 8192) once the ring holds more than
``history / 8`` shingles. Until then it holds at most one ring entry per eight slots, a
quarter of the full-size table's load once the ring is full, so it drops fewer shingles
than that table does. The ring takes 4 bytes per shingle while the table grows, then 2,
allocated by powers of two of entries (one allocation each, not a realloc per few
appends) up to ``history`` of them (16 KiB), then wraps. A stream idle after 400 tokens (about 370
shingles) holds 6 KiB of table, not 24.
"""

from __future__ import annotations

from array import array
from zlib import crc32

import numpy as np
import numpy.typing as npt

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
TOP = 15
#: Joins a batch of keys so that one ``lower``, ``encode`` and ``split`` serve them all,
#: and ``map(crc32, ...)`` hashes them without a Python step per key. No key holds it (the
#: blocker's tokens hold no carriage return), and it is neither cased nor case-ignorable,
#: so the joined text lowers exactly as each key on its own would (a final sigma stays final).
_SEP = "\r"
_SEP_BYTES = b"\r"


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
        "_fps",
        "_k",
        "_keys",
        "_last",
        "_maxbits",
        "_pairs",
        "_ring",
        "_rpos",
        "_sized",
    )

    def __init__(self, shingle: int, history: int) -> None:
        if history & (history - 1) or not 256 <= history <= 16384:
            raise ValueError("recurrence_history must be a power of two in 256..16384")
        self._k = shingle
        self._maxbits = (history * 2).bit_length() - 1
        # The table is allocated by the first ``reserve`` (a stream that ends, or sits idle,
        # before it never pays for it) and grows with the ring (``_grow``); ``_bits`` is its
        # current size in bits.
        self._bits = 0
        self._pairs = bytearray()  # a pair's two counters, low nibble for the even slot
        self._fps = bytearray()
        # While the table grows, a ring entry is the shingle's slot in the full-size table
        # and its fingerprint, ``slot << 8 | fp`` (what ``_grow`` needs to insert it again),
        # or ``_GONE``; once the table is full-size, the ring becomes two bytes an entry,
        # the slot the shingle went to (what expiry needs) or ``_DROPPED``.
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
        as they were first inserted; a shingle that finds its pair full is dropped."""
        bits = min(self._maxbits, max(_MIN_BITS, (shingles * 8 - 1).bit_length()))
        if bits <= self._bits:
            return
        less = self._maxbits - bits
        pairs = bytearray(1 << (bits - 1))
        fps = bytearray(1 << bits)
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
            fp = entry & 0xFF
            slot = entry >> (8 + less)
            b = pairs[slot >> 1]
            c = (b >> 4) if slot & 1 else (b & 15)
            if not c or fps[slot] != fp:
                slot = _other_slot(pairs, fps, slot, fp)
                if slot == _DROPPED:
                    slots[i] = _DROPPED if not less else _GONE
                    continue
                c = (b >> 4) if slot & 1 else (b & 15)
            if c < TOP:
                pairs[slot >> 1] = b + (16 if slot & 1 else 1)
            if not less:
                slots[i] = slot
        self._pairs, self._fps, self._bits, self._ring = pairs, fps, bits, slots
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
        fulls: list[int] = (rolling >> np.uint64(64 - self._maxbits - 8)).tolist()
        pairs = self._pairs
        fps = self._fps
        ring = self._ring
        wrap = (1 << (self._maxbits - 1)) - 1  # ``history`` is a power of two
        less = self._maxbits - self._bits
        slot_shift = 8 + less  # the slot in the table as large as it is now
        rpos = self._rpos
        filled = self._filled
        dropped, top = _DROPPED, TOP
        append = counts.append
        for full in fulls:
            slot = full >> slot_shift
            fp = full & 0xFF
            pi = slot >> 1
            b = pairs[pi]
            if not b:
                # Both slots of the pair are free (most pairs, in a table with room): a new
                # shingle takes its own slot. What the general test below would do, in the
                # fewest steps.
                fps[slot] = fp
                pairs[pi] = 16 if slot & 1 else 1
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
                if slot != dropped and c < top:
                    pairs[pi] = b + (16 if slot & 1 else 1)
                if c:
                    append(c)
            if less:  # the table still grows: the ring keeps full-size slots and fps
                filled += 1
                ring.append(full if slot != dropped else _GONE)
            else:  # the ring wraps at ``history`` entries (see ``reserve``)
                o = ring[rpos]
                ring[rpos] = slot
                rpos = (rpos + 1) & wrap
                if o != dropped:  # forget the oldest shingle
                    po = o >> 1
                    b = pairs[po]
                    if o & 1:
                        if b >> 4:
                            pairs[po] = b - 16
                    elif b & 15:
                        pairs[po] = b - 1
        self._rpos, self._filled = rpos, filled
        return counts
